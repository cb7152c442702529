"""Why is my run slow? Each rank's step breakdown (runtime/world/step_clock.py sends it) and one
verdict: balanced, a straggler and why (its data or its compute), communication-bound, or
input-bound everywhere. Pure: numbers in, a report out (docs/performance.md says how to read it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Set for the workers by `notebook-launcher launch --report_performance`: a private folder where each
# rank keeps its figures (rank<N>.json); "1" switches the step clock on in a plain script, "0" off
# (it is on by default inside notebook_launch, where the launcher reads it).
PARTS = ("data", "compute", "wait")
# The other ranks wait for the late one at least this share of a step: their mean wait less the late
# rank's own. Every rank pays the collective itself (a slow network, a loaded machine stretch it for
# all), and the late rank pays only that; what the others wait beyond it is the time they wait for it.
STRAGGLER_WAIT_SHARE = 0.15
INPUT_BOUND_SHARE = 0.5  # every rank waits for its data at least half of each step
COMM_BOUND_SHARE = 0.3  # every rank waits for the others at least this share, nobody is late
# A launch prints the verdict only for a run whose pace matters and whose steps were measured well:
# every rank measured at least this many steps, taking at least this many seconds. A toy run (the
# quick start's 48 steps of a few ms) gets none; its breakdown stays in result.performance.
SAY_MIN_STEPS = 50
SAY_MIN_SECONDS = 5.0


@dataclass(frozen=True)
class RankSteps:
    """One rank's mean optimizer step, in milliseconds."""

    rank: int
    steps: int
    step_ms: float
    data_ms: float
    compute_ms: float  # forward + backward + optimizer, less the waits inside them
    wait_ms: float  # in collectives and DDP's gradient all-reduce, for the other ranks
    # a pipeline rank's last step: its stages, measured bubble against the schedule's ideal, and
    # its forward/backward blocks per micro-batch (runtime/parallel/pipeline/timeline.py)
    pipeline: dict[str, Any] | None = field(default=None, compare=False)

    @property
    def other_ms(self) -> float:
        """The loop's own code between the measured parts (logging, metrics, the user's Python)."""
        return max(0.0, self.step_ms - self.data_ms - self.compute_ms - self.wait_ms)

    def share(self, part: str) -> float:
        return getattr(self, f"{part}_ms") / self.step_ms if self.step_ms > 0 else 0.0

    @classmethod
    def from_payload(cls, rank: int, payload: dict[str, Any]) -> RankSteps:
        steps = max(1, int(payload.get("steps", 0)))
        ms = {key[:-2]: float(value) * 1000 / steps for key, value in payload.items() if key.endswith("_s")}
        compute = ms.get("forward", 0.0) + ms.get("backward", 0.0) + ms.get("optimizer", 0.0)
        pipeline = payload.get("pipeline") if isinstance(payload.get("pipeline"), dict) else None
        return cls(
            rank, steps, ms.get("step", 0.0), ms.get("data", 0.0), compute, ms.get("wait", 0.0), pipeline
        )


@dataclass
class PerformanceReport:
    """`result.performance` / `handle.performance`: per-rank breakdowns and the verdict."""

    ranks: list[RankSteps] = field(default_factory=list)

    @classmethod
    def from_folder(cls, folder: str | Path) -> PerformanceReport:
        """The figures the ranks of a CLI launch left in `folder` (see REPORT_ENV)."""
        payloads = {}
        for path in Path(folder).glob("rank*.json"):
            try:
                payloads[int(path.stem[4:])] = json.loads(path.read_text())
            except (OSError, ValueError):
                continue  # a rank that died while writing: the others still tell the story
        return cls.from_payloads(payloads)

    @classmethod
    def from_payloads(cls, payloads: dict[int, dict[str, Any]]) -> PerformanceReport:
        ranks = [RankSteps.from_payload(rank, payloads[rank]) for rank in sorted(payloads)]
        return cls([r for r in ranks if r.steps > 0 and r.step_ms > 0])

    # ----------------------------------------------------------------- verdict
    @property
    def kind(self) -> str:
        """'balanced', 'data straggler', 'compute straggler', 'code straggler' (the loop's own code
        between the measured parts), 'communication-bound', 'input-bound', or 'unmeasured' (no
        optimizer step went through a prepared optimizer)."""
        return self._verdict()[0]

    @property
    def verdict(self) -> str:
        """One sentence a person can act on (docs/performance.md: what to do about each)."""
        return self._verdict()[1]

    @property
    def balanced(self) -> bool:
        return self.kind in ("balanced", "unmeasured")

    @property
    def worth_saying(self) -> bool:
        """Whether a launch prints the verdict: something is off, and the run was long enough for
        that to matter (SAY_MIN_STEPS steps and SAY_MIN_SECONDS seconds measured on every rank)."""
        if self.balanced:
            return False
        steps = min(r.steps for r in self.ranks)
        seconds = min(r.steps * r.step_ms for r in self.ranks) / 1000
        return steps >= SAY_MIN_STEPS and seconds >= SAY_MIN_SECONDS

    @property
    def straggler(self) -> int | None:
        found = self._straggler()
        return found.rank if found is not None else None

    def spread(self, part: str) -> float:
        """max / min across ranks of a part's time per step (1.0 = even)."""
        values = [getattr(r, f"{part}_ms") for r in self.ranks]
        return max(values) / min(values) if values and min(values) > 0 else float("inf") if values else 1.0

    def _straggler(self) -> RankSteps | None:
        if len(self.ranks) < 2:
            return None
        late = min(self.ranks, key=lambda r: r.wait_ms)  # the one the others wait for waits least
        step = sum(r.step_ms for r in self.ranks) / len(self.ranks)
        return late if self._waiting_for(late) >= STRAGGLER_WAIT_SHARE * step else None

    def _waiting_for(self, late: RankSteps) -> float:
        """How long per step the other ranks wait for `late`, beyond the collectives' own time."""
        others = [r for r in self.ranks if r is not late]
        return sum(r.wait_ms for r in others) / len(others) - late.wait_ms

    def _verdict(self) -> tuple[str, str]:
        if not self.ranks:
            return "unmeasured", "no step was measured (steps go through a prepared optimizer's step())"
        late = self._straggler()
        if late is not None:
            others = [r for r in self.ranks if r is not late]
            wait_share = self._waiting_for(late) / (sum(r.step_ms for r in others) / len(others))
            causes = {  # how much longer than the others' mean each part takes on the late rank
                part: getattr(late, f"{part}_ms")
                - sum(getattr(r, f"{part}_ms") for r in others) / len(others)
                for part in ("data", "compute", "other")
            }
            part = max(causes, key=causes.__getitem__)
            mine = getattr(late, f"{part}_ms")
            theirs = mine - causes[part]
            kind = {"data": "data straggler", "compute": "compute straggler", "other": "code straggler"}[part]
            part = {
                "data": "data loading",
                "compute": "compute",
                "other": "own code between forward, backward and step (logging, metrics, Python)",
            }[part]
            times = f"{mine / theirs:.1f}× the others'" if theirs > 0.1 else "far more than the others'"
            stage = f" (pipeline stage(s) {late.pipeline['stages']})" if late.pipeline else ""
            return kind, (
                f"rank {late.rank}{stage} is the straggler: its {part} takes {times} ({mine:.0f} ms per step) — "
                f"the other ranks spend {wait_share:.0%} of each step waiting for it"
            )
        if all(r.share("data") >= INPUT_BOUND_SHARE for r in self.ranks):
            share = min(r.share("data") for r in self.ranks)
            return "input-bound", (
                f"input-bound on every rank: at least {share:.0%} of each step waits for data "
                "(more DataLoader workers, pin_memory, a faster dataset)"
            )
        if len(self.ranks) > 1 and all(r.share("wait") >= COMM_BOUND_SHARE for r in self.ranks):
            share = min(r.share("wait") for r in self.ranks)
            return "communication-bound", (
                f"communication-bound: every rank spends at least {share:.0%} of each step in collectives "
                "and nobody is late (larger batches, gradient accumulation, fewer or larger all-reduces)"
            )
        return "balanced", "balanced: no rank holds the others back"

    # ------------------------------------------------------------------ display
    def table(self) -> str:
        head = f"{'rank':>4} {'steps':>6} {'step ms':>8} {'data':>6} {'compute':>8} {'wait':>6} {'other':>6}"
        rows = [
            f"{r.rank:>4} {r.steps:>6} {r.step_ms:>8.1f} {r.share('data'):>6.0%} {r.share('compute'):>8.0%} "
            f"{r.share('wait'):>6.0%} {r.other_ms / r.step_ms if r.step_ms else 0:>6.0%}"
            for r in self.ranks
        ]
        return "\n".join([head, *rows])

    def pipeline_lines(self) -> list[str]:
        """Per pipeline rank: its stages, the measured bubble (mean over the steps) and the ideal."""
        return [
            f"rank {r.rank} stage(s) {r.pipeline.get('stages')}: bubble {float(r.pipeline.get('mean_bubble', 0)):.3f} "
            f"(ideal {float(r.pipeline.get('ideal_bubble', 0)):.3f}, {r.pipeline.get('schedule')}, "
            f"{r.pipeline.get('microbatches')} micro-batches)"
            for r in self.ranks
            if r.pipeline
        ]

    def __str__(self) -> str:
        return "\n".join([self.verdict, self.table(), *self.pipeline_lines()])

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))
