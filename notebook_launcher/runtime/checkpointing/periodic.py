"""ProjectConfiguration(save_every_n_steps=N): save_state() every N optimizer steps, without a call
in the training loop.

When: at the end of a training batch, i.e. when the loop asks a prepared DataLoader for its next
batch after a body that took an optimizer step. That is where a hand-written `save_state()` at the
end of the loop body stands, so the checkpoint holds the model, optimizer, scheduler, RNG and the
loader's position after the same step and resumes exactly. A loader whose body took no optimizer
step (evaluation) never saves. Every rank takes the same optimizer steps, so all ranks save at the
same batch without agreeing first. The count starts at 0 in each run (a resumed run counts from its
resume: resuming from a periodic checkpoint keeps the uninterrupted run's saving steps).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any


class PeriodicSaves:
    """Counts optimizer steps across loader batches and saves every `every` of them."""

    def __init__(self, every: int, optimizer_steps: Callable[[], int], save: Callable[[], object]) -> None:
        self.every = every
        self.optimizer_steps = optimizer_steps
        self.save = save
        self.last_saved_at = 0

    def before_batch(self) -> int:
        return self.optimizer_steps()

    def after_batch(self, steps_before: int) -> None:
        """The loop came back for the next batch: save if this body stepped and N steps have passed."""
        steps = self.optimizer_steps()
        if steps > steps_before and steps - self.last_saved_at >= self.every:
            self.last_saved_at = steps
            self.save()


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
