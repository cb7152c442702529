"""What a pipeline rank did in its last step, measured: each forward / backward (/ weight-gradient)
block per micro-batch with its start and end, and the time it waited for the other stages (torch's
schedules wait for their point-to-point transfers in one function, schedules._wait_batch_p2p, timed
here). The figures ride in the step clock's payload (result.performance, the RunView's pipeline tab).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from ....config.pipeline import SINGLE_STAGE
from .ideal_bubble import simulated_bubble

MAX_BLOCKS = 256  # of the last step, sent to the launcher (a long schedule is cut, not the figures)
_active: Timeline | None = None  # the timeline of the step running in this process
_patched = False


def ideal_bubble(schedule: str, pp_size: int, microbatches: int, virtual_stages: int) -> float:
    """The schedule's idle share with equal stages and free transfers: (p - 1) / (m + p - 1) for
    GPipe and 1F1B; (p - 1) / (v m + p - 1) with v stages per rank until a multi-stage schedule is
    built, which then gets its own from the action lists torch runs (Timeline.schedule_built)."""
    v = max(1, virtual_stages)
    return (pp_size - 1) / (v * microbatches + pp_size - 1)


class Timeline:
    """One per prepared pipeline model; begin()/end() around each schedule step."""

    def __init__(
        self, schedule: str, pp_size: int, microbatches: int, stage_ids: Sequence[int], virtual: int
    ):
        self.schedule, self.stage_ids = schedule, list(stage_ids)
        self.ideal = ideal_bubble(schedule, pp_size, microbatches, virtual)
        self.microbatches = microbatches
        self.blocks: list[tuple[int, str, int, float, float]] = []  # (stage, F/B/W, micro-batch, t0, t1)
        self.waited = 0.0
        self.busy = {"F": 0.0, "B": 0.0, "W": 0.0}
        self.steps, self.total_step, self.total_waited = 0, 0.0, 0.0
        self._began = 0.0
        self.last: dict[str, Any] = {}

    def schedule_built(self, schedule: Any) -> None:
        """A multi-stage schedule's ideal: the action lists torch runs for it, on the unit clock
        (ideal_bubble.py). For looped_bfs and interleaved_1f1b that is the formula; the zero-bubble
        schedules split backward into input and weight blocks and idle far less. (GPipe's and 1F1B's
        lists in torch only describe those schedules, with an off-by-one in 1F1B's: the formula.)"""
        if self.schedule not in SINGLE_STAGE:
            self.ideal = simulated_bubble(schedule.pipeline_order)

    def attach(self, stages: Sequence[Any]) -> None:
        """Time this rank's stages' per-micro-batch work (instance attributes: nothing global)."""
        _patch_waits()
        for stage in stages:
            for name, kind in (
                ("forward_one_chunk", "F"),
                ("backward_one_chunk", "B"),
                ("backward_weight_one_chunk", "W"),
            ):
                setattr(stage, name, self._timed(getattr(stage, name), int(stage.stage_index), kind))

    def _timed(self, run: Callable[..., Any], stage: int, kind: str) -> Callable[..., Any]:
        def timed(chunk: int, *args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return run(chunk, *args, **kwargs)
            finally:
                ended = time.perf_counter()
                self.busy[kind] += ended - began
                if len(self.blocks) < MAX_BLOCKS:
                    self.blocks.append((stage, kind, int(chunk), began, ended))

        return timed

    def begin(self) -> None:
        global _active
        self.blocks, self.waited = [], 0.0
        self.busy = dict.fromkeys(self.busy, 0.0)
        self._began = time.perf_counter()
        _active = self

    def end(self) -> dict[str, float]:
        """Close the step: its figures kept in `last`; returns seconds by part for the step clock."""
        global _active
        _active = None
        step = time.perf_counter() - self._began
        self.steps += 1
        self.total_step += step
        self.total_waited += self.waited
        ms = 1000.0
        self.last = {
            "schedule": self.schedule,
            "stages": self.stage_ids,
            "microbatches": self.microbatches,
            "step_ms": step * ms,
            "wait_ms": self.waited * ms,
            "bubble": self.waited / step if step > 0 else 0.0,
            "mean_bubble": self.total_waited / self.total_step if self.total_step > 0 else 0.0,
            "ideal_bubble": self.ideal,
            "blocks": [
                [stage, kind, chunk, round((t0 - self._began) * ms, 3), round((t1 - self._began) * ms, 3)]
                for stage, kind, chunk, t0, t1 in self.blocks
            ],
        }
        return {"forward": self.busy["F"], "backward": self.busy["B"] + self.busy["W"], "wait": self.waited}


def _patch_waits() -> None:
    """Once per process: time the schedules' waits for the other stages into the running timeline."""
    global _patched
    if _patched:
        return
    from torch.distributed.pipelining import schedules

    original = schedules._wait_batch_p2p

    def timed_wait(work: Any) -> Any:
        began = time.perf_counter()
        try:
            return original(work)
        finally:
            if _active is not None:
                _active.waited += time.perf_counter() - began

    schedules._wait_batch_p2p = timed_wait
    _patched = True
