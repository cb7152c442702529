"""What a RunView shows, kept as plain data: per-rank output, progress, metrics, final status.

`RunState.apply(event)` folds one launch event in. It has no widget code, so the view's logic is
tested without a kernel, and the view only turns this state into widget values.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ...launch.cell.checkpoint_view import CheckpointBoard
from ...launch.cell.progress_view import prune
from ...launch.events import (
    BarUpdate,
    MemorySampled,
    MemoryWarning,
    MetricLogged,
    OutputLine,
    ProgressUpdate,
    RunFinished,
    RunRestarting,
    RunStarted,
    StepsMeasured,
)
from ...system.host_memory import format_bytes

MAX_LINES_PER_RANK = 2000


@dataclass
class Progress:
    """The progress of one rank in its current epoch."""

    step: int = 0
    total: int | None = None
    epoch: int | None = None
    started: float | None = None  # time of the first update of this epoch
    first_step: int = 0  # step count at `started`
    updated: float | None = None

    def seconds_left(self) -> float | None:
        """Time left in this epoch at the rate seen so far, or None while it cannot be told."""
        if self.total is None or self.started is None or self.updated is None:
            return None
        done = self.step - self.first_step
        elapsed = self.updated - self.started
        if done <= 0 or elapsed <= 0:
            return None
        return max(0.0, (self.total - self.step) * elapsed / done)


@dataclass
class RunState:
    """Everything a RunView displays, built from the events of one launch."""

    world_size: int | None = None
    local_ranks: tuple[int, ...] = ()
    started_at: float | None = None
    lines: dict[int, deque[tuple[str, str]]] = field(default_factory=dict)
    all_lines: deque[tuple[int, str, str]] = field(default_factory=lambda: deque(maxlen=MAX_LINES_PER_RANK))
    line_counts: dict[int, int] = field(default_factory=dict)  # lines received per rank, ever
    progress: dict[int, Progress] = field(default_factory=dict)
    bars: dict[tuple[int, int], BarUpdate] = field(default_factory=dict)  # tqdm bars by (rank, bar)
    bars_folded: int = 0
    metrics: list[dict[str, Any]] = field(default_factory=list)
    finished: RunFinished | None = None
    traceback_shown: bool = False
    restart: RunRestarting | None = None  # the last restart (max_restarts), shown in the status line
    memory: dict[int, dict[str, Any]] = field(default_factory=dict)  # latest sample per rank
    memory_peaks: dict[int, int] = field(default_factory=dict)
    memory_warning: MemoryWarning | None = None
    steps: dict[int, dict[str, Any]] = field(default_factory=dict)  # each rank's step breakdown so far
    checkpoints: CheckpointBoard = field(default_factory=CheckpointBoard)  # in flight, last complete

    # ------------------------------------------------------------------ events
    def apply(self, event: object) -> None:
        """Fold one launch event into the state; unknown events are ignored."""
        self.checkpoints.apply(event)  # (a restart also drops the save its attempt left unpublished)
        if isinstance(event, RunStarted):
            self.world_size = event.world_size
            self.local_ranks = tuple(event.local_ranks)
            self.started_at = time.time()
            for rank in self.local_ranks:
                self._lines_of(rank)
        elif isinstance(event, OutputLine):
            if event.live:  # a "\r" line not yet ended: the cell shows it; the panes get it once ended
                return
            self._lines_of(event.rank).append((event.stream, event.text))
            self.line_counts[event.rank] = self.line_counts.get(event.rank, 0) + 1
            self.all_lines.append((event.rank, event.stream, event.text))
        elif isinstance(event, ProgressUpdate):
            self._apply_progress(event)
        elif isinstance(event, BarUpdate):  # a rank's tqdm bar (launch/worker/progress_relay.py)
            if event.closed and not event.leave:
                self.bars.pop((event.rank, event.bar), None)
            else:
                self.bars[(event.rank, event.bar)] = event
                self.bars_folded += prune(self.bars)
        elif isinstance(event, MetricLogged):
            row = {"rank": event.rank, "step": event.step, "time": event.time}
            row.update(event.values)
            self.metrics.append(row)
        elif isinstance(event, RunRestarting):
            self.restart, self.finished, self.traceback_shown = event, None, False
            for rank in self.local_ranks:  # in every rank's output, where the failure was shown
                self.apply(OutputLine(rank, "stderr", f"notebook_launch: {event.text}"))
        elif isinstance(event, MemorySampled):
            self.memory[event.rank] = event.sample
            peak = event.sample.get("peak_rss", event.sample.get("rss", 0))
            self.memory_peaks[event.rank] = max(peak, self.memory_peaks.get(event.rank, 0))
        elif isinstance(event, StepsMeasured):
            self.steps[event.rank] = event.figures
        elif isinstance(event, MemoryWarning):
            self.memory_warning = self.memory_warning or event
        elif isinstance(event, RunFinished):
            self.finished = event
            extra = event.extra if isinstance(event.extra, dict) else {}
            traceback = extra.get("shown_traceback") or extra.get("traceback")  # folded, coloured first
            if event.failed_rank is not None and isinstance(traceback, str):
                self.add_traceback(event.failed_rank, traceback)

    def add_traceback(self, rank: int, traceback: str) -> None:
        """Show a failed rank's remote traceback in its output (once)."""
        if self.traceback_shown:
            return
        self.traceback_shown = True
        for line in traceback.rstrip().splitlines():
            self.apply(OutputLine(rank, "stderr", line))

    def _lines_of(self, rank: int) -> deque[tuple[str, str]]:
        if rank not in self.lines:
            self.lines[rank] = deque(maxlen=MAX_LINES_PER_RANK)
        return self.lines[rank]

    def _apply_progress(self, event: ProgressUpdate) -> None:
        current = self.progress.get(event.rank)
        new_epoch = current is None or event.epoch != current.epoch or event.step < current.step
        if new_epoch or current is None:  # (None is a new epoch too)
            # The first update of an epoch starts the clock; a step count of 1 means one batch
            # already took an unknown time, so the rate is measured from here on.
            current = Progress(epoch=event.epoch, started=event.time, first_step=event.step)
            self.progress[event.rank] = current
        current.step = event.step
        current.total = event.total
        current.updated = event.time

    # ----------------------------------------------------------------- queries
    @property
    def total_lines(self) -> int:
        return sum(self.line_counts.values())

    @property
    def ranks(self) -> list[int]:
        """Every rank seen so far, in order."""
        return sorted(set(self.lines) | set(self.progress) | set(self.local_ranks))

    @property
    def main_rank(self) -> int:
        """The rank shown by default: 0 when it runs here, else the lowest local rank."""
        ranks = self.ranks
        return 0 if 0 in ranks or not ranks else ranks[0]

    def metric_names(self) -> list[str]:
        """Names of the numeric metrics logged so far, in first-seen order."""
        names: dict[str, None] = {}
        for row in self.metrics:
            for key, value in row.items():
                if key not in ("rank", "step", "time") and _is_number(value):
                    names.setdefault(key, None)
        return list(names)

    def series(self, name: str, rank: int) -> list[tuple[float, float]]:
        """(step, value) points of one metric of one rank; rows without a step count up from 0."""
        points: list[tuple[float, float]] = []
        for row in self.metrics:
            if row["rank"] != rank or not _is_number(row.get(name)):
                continue
            x = row["step"] if row["step"] is not None else len(points)
            points.append((float(x), float(row[name])))
        return points

    def status_text(self, now: float | None = None) -> str:
        """One line: running / done / failed at rank N with the error / stopped / timed out."""
        finished = self.finished
        if finished is None:
            if self.started_at is None:
                return "waiting for the launch to start"
            elapsed = (now or time.time()) - self.started_at
            again = f" · {self.restart.text}" if self.restart else ""
            running = f"running on {self.world_size} process(es) for {format_seconds(elapsed)}{again}"
            if self.memory_warning is not None:
                running += f" — memory is running out (rank {self.memory_warning.rank}), see below"
            return running
        took = format_seconds(finished.duration)
        if finished.status == "done":
            return f"done in {took}"
        if finished.status == "failed":
            where = f" at rank {finished.failed_rank}" if finished.failed_rank is not None else ""
            return f"failed{where} after {took}: {finished.error or 'see the output above'}"
        if finished.status == "stopped":
            return f"stopped after {took}"
        return f"timed out after {took}" + (f": {finished.error}" if finished.error else "")

    def memory_text(self) -> str:
        """'memory: rank 0 1.2 GiB (peak 1.4 GiB) · rank 1 …; machine 9.8 of 24 GiB', or ''."""
        if not self.memory:
            return ""
        parts = []
        for rank in sorted(self.memory):
            sample = self.memory[rank]
            text = f"rank {rank} {format_bytes(sample.get('rss', 0))} (peak {format_bytes(self.memory_peaks[rank])})"
            if "gpu_allocated" in sample:
                text += f", GPU {format_bytes(sample['gpu_allocated'])} (peak {format_bytes(sample.get('gpu_peak', 0))})"
            parts.append(text)
        last = self.memory[max(self.memory, key=lambda r: self.memory[r].get("time", 0))]
        where = "machine" if last.get("limit_source") == "machine" else "limit"
        total = (
            f"; {where} {format_bytes(last.get('used', 0))} of {format_bytes(last.get('limit', 0))} in use"
        )
        return "memory: " + " · ".join(parts) + (total if last.get("limit") else "")

    def progress_text(self, rank: int) -> str:
        """'epoch 1 · step 12/100 · 0:05 left' for one rank, or '' before any progress."""
        progress = self.progress.get(rank)
        if progress is None:
            steps = [row["step"] for row in self.metrics if row["rank"] == rank and row["step"] is not None]
            return f"step {max(steps)}" if steps else ""
        parts = [] if progress.epoch is None else [f"epoch {progress.epoch}"]
        total = "" if progress.total is None else f"/{progress.total}"
        parts.append(f"step {progress.step}{total}")
        left = progress.seconds_left()
        if self.finished is None and left is not None:
            parts.append(f"{format_seconds(left)} left")
        return " · ".join(parts)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def format_seconds(seconds: float) -> str:
    """0.4 s, 12.3 s, 1:05, 1:02:03."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
