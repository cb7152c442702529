"""ProjectConfiguration(save_every_n_steps=N, save_every_n_minutes=T): save_state() every N optimizer
steps and/or every T minutes, without a call in the training loop.

When: at the end of a training batch, i.e. when the loop asks a prepared DataLoader for its next
batch after a body that took an optimizer step. That is where a hand-written `save_state()` at the
end of the loop body stands, so the checkpoint holds the model, optimizer, scheduler, RNG and the
loader's position after the same step and resumes exactly. A loader whose body took no optimizer
step (evaluation) never saves. The count starts at 0 in each run (a resumed run counts from its
resume: resuming from a periodic checkpoint keeps the uninterrupted run's saving steps).

Every N steps needs no agreement: every rank takes the same optimizer steps. Every T minutes does:
each rank's clock is its own (and save_state is collective), so rank 0's clock decides, at steps
every rank agrees on beforehand. Like the preemption check (world/preemption.py), the ranks meet in
one tiny all_reduce at a check step: rank 0 says whether T minutes have passed since the last save
(or the first batch) and how many steps until the next check (about T/20 of its measured step time,
at most ~10 s, at least 1 step); the others add zeros, so every rank gets rank 0's answer and saves,
or not, after the same step. A save is late by at most one check interval. Either kind of save
restarts both counts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

MAX_CHECK_SECONDS = 10.0  # between two time checks, at most about this long
CHECKS_PER_PERIOD = 20  # at least about this many time checks per T minutes
MAX_CHECK_STEPS = 10_000

Agree = Callable[[bool, int], "tuple[bool, int]"]  # rank 0's (due, steps to the next check), on every rank


class PeriodicSaves:
    """Counts optimizer steps across loader batches; saves every `every` steps and/or `every_seconds`."""

    def __init__(
        self,
        every: int | None,
        optimizer_steps: Callable[[], int],
        save: Callable[[], object],
        every_seconds: float | None = None,
        agree: Agree | None = None,
    ) -> None:
        self.every = every
        self.every_seconds = every_seconds
        self.optimizer_steps = optimizer_steps
        self.save = save
        self.agree: Agree = agree or (lambda due, steps: (due, steps))  # one process: its own clock
        self.clock: Callable[[], float] = time.monotonic
        self.last_saved_at = 0
        self.since: float | None = None  # rank 0's clock at the first batch or the last save
        self.next_check = 1  # the optimizer step count at which the ranks next compare the clock
        self._last_check: tuple[int, float] | None = None
        self.saved: list[tuple[int, float]] = []  # (steps, seconds since the previous save) of each

    def before_batch(self) -> int:
        if self.since is None:
            self.since = self.clock()
        return self.optimizer_steps()

    def after_batch(self, steps_before: int) -> None:
        """The loop came back for the next batch: save if this body stepped and a period has passed."""
        steps = self.optimizer_steps()
        if steps <= steps_before:
            return
        due = self.every is not None and steps - self.last_saved_at >= self.every
        if not due and self.every_seconds is not None and steps >= self.next_check:
            due = self._time_is_up(steps)
        if due:
            now = self.clock()
            self.saved.append((steps, now - (self.since if self.since is not None else now)))
            self.last_saved_at, self.since = steps, now
            self.save()

    def _time_is_up(self, steps: int) -> bool:
        """Whether T minutes passed on rank 0's clock (every rank calls this at the same step)."""
        now = self.clock()
        since = self.since if self.since is not None else now
        due, interval = self.agree(
            now - since >= (self.every_seconds or 0.0), self._steps_to_next_check(steps, now)
        )
        self.next_check = steps + max(1, interval)
        self._last_check = (steps, now)
        return due

    def _steps_to_next_check(self, steps: int, now: float) -> int:
        """About min(T/20, 10 s) of steps at the rate since the last check (1 before there is one)."""
        if self._last_check is None or steps <= self._last_check[0] or now <= self._last_check[1]:
            return 1
        per_step = (now - self._last_check[1]) / (steps - self._last_check[0])
        spacing = min((self.every_seconds or 0.0) / CHECKS_PER_PERIOD, MAX_CHECK_SECONDS)
        return int(min(MAX_CHECK_STEPS, max(1, spacing / per_step)))


def rank_zero_decides(device: Any) -> Agree:
    """The agreement of the time checks: one all_reduce (max) of rank 0's two numbers, zeros elsewhere."""

    def agree(due: bool, steps: int) -> tuple[bool, int]:
        import torch
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
            return due, steps
        mine = [float(due), float(steps)] if dist.get_rank() == 0 else [0.0, 0.0]
        values = torch.tensor(mine, dtype=torch.float64, device=device)
        dist.all_reduce(values, op=dist.ReduceOp.MAX)
        return bool(values[0].item()), int(values[1].item())

    return agree


def with_periodic_saves(batches: Iterator[Any], periodic: PeriodicSaves | None) -> Iterator[Any]:
    """A prepared loader's batches; between a body and the next batch, the periodic save, at the
    loader position a save_state() at the end of the body sees."""
    if periodic is None:
        yield from batches
        return
    try:
        for batch in batches:
            before = periodic.before_batch()
            yield batch
            periodic.after_batch(before)
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()  # as `yield from` would: a loop left early ends the pass now
