"""What a running launch tells its observers (the printer in a cell, the RunView widget).

Observers are plain callables `observer(event)`; they run in the thread that supervises the launch
and must return quickly. Workers produce these through the parent<->worker channel.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

Stream = Literal["stdout", "stderr"]  # a worker's output pipe
RunStatus = Literal["done", "failed", "stopped", "timeout"]  # how a run ended (RunFinished)


@dataclass(frozen=True)
class RunStarted:
    world_size: int
    local_ranks: tuple[int, ...]  # global ranks running on this machine
    start_method: str
    config: Any  # LaunchConfig
    ask_report: Any = None  # callable: ask for a HangReport now (a HangReported event answers)


@dataclass(frozen=True)
class OutputLine:
    rank: int
    stream: Stream
    text: str  # one line, without its trailing newline
    live: bool = False  # a line rewritten with "\r" (not yet ended): shown in place, not logged


@dataclass(frozen=True)
class WorkerDisplay:
    """A rank's display() / update_display() / clear_output() (launch/worker/display_relay.py)."""

    rank: int
    data: dict[str, Any]  # the mimebundle; empty for a clear
    metadata: dict[str, Any] = field(default_factory=dict)
    display_id: str | None = None
    update: bool = False
    clear: bool = False
    wait: bool = False  # clear_output(wait=True)


@dataclass(frozen=True)
class BarUpdate:
    """One tqdm bar of one rank (launch/worker/progress_relay.py): its numbers and its text."""

    rank: int
    bar: int  # the bar's id within the rank
    desc: str
    n: float
    total: float | None
    stats: str  # "37/100 [00:02<00:04, 15.2it/s]"
    text: str  # the whole meter as tqdm writes it in a terminal
    closed: bool = False
    leave: bool = True


@dataclass(frozen=True)
class MetricLogged:
    rank: int
    step: int | None
    values: dict[str, Any]
    time: float


@dataclass(frozen=True)
class StepsMeasured:
    """A rank's step breakdown so far (runtime/world/step_clock.py): sums in seconds and steps."""

    rank: int
    figures: dict[str, Any]


@dataclass(frozen=True)
class ProgressUpdate:
    rank: int
    step: int  # batches done so far in this epoch (1-based count)
    total: int | None  # batches in this epoch when known
    time: float
    epoch: int | None = None


@dataclass(frozen=True)
class RunFinished:
    status: RunStatus
    duration: float
    failed_rank: int | None = None
    error: str | None = None  # one-line summary for a status line
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class HangReported:
    """Where every rank is (hang_report.HangReport): after stall_timeout without progress, at the
    timeout, or when asked (RunHandle.stacks(), the RunView's Stacks button)."""

    report: Any  # HangReport


@dataclass(frozen=True)
class RunRestarting:
    """The ranks are started again after a failure or a preemption (max_restarts)."""

    attempt: int  # 1 for the first restart
    max_restarts: int
    reason: str  # e.g. "rank 1 was killed (SIGKILL) at step 37"
    checkpoint: str | None  # the last checkpoint saved, which the function's load_state() finds
    start_again: bool = False  # the process group never formed (rendezvous_watch.py): not a restart

    @property
    def text(self) -> str:
        if self.start_again:
            return f"started again: {self.reason}"
        resume = (
            f"resuming from {self.checkpoint.rstrip('/').rsplit('/', 1)[-1]}"
            if self.checkpoint
            else ("starting over (no checkpoint saved yet)")
        )
        return f"restart {self.attempt}/{self.max_restarts}: {self.reason}, {resume}"


@dataclass(frozen=True)
class CheckpointWriting:
    """A rank's background write of an asynchronous save_state (runtime/checkpointing/async_save.py):
    "staged" when save_state returned, "writing" with the bytes on disk so far (at a modest rate),
    "written" once its files are complete (it then waits for the others), or "failed"."""

    rank: int
    step: int
    path: str  # the folder it is published as
    written_bytes: int
    staged_bytes: int  # what the rank copied to host memory for it (the files are about as big)
    state: str
    time: float


@dataclass(frozen=True)
class CheckpointSaved:
    """A save_state folder is complete: published by a background save, or a synchronous save."""

    path: str
    step: int
    blocked_s: float  # how long training waited for it
    total_s: float  # from the call until the folder was in place
    background: bool


@dataclass(frozen=True)
class MemorySampled:
    rank: int
    sample: dict[str, Any]  # time, rss, peak_rss, used, limit, limit_source; gpu_* on a GPU


@dataclass(frozen=True)
class MemoryWarning:
    rank: int  # the rank holding the most memory when the limit came near
    text: str  # one line for the cell and the RunView's status


Event = (
    RunStarted
    | OutputLine
    | WorkerDisplay
    | BarUpdate
    | MetricLogged
    | ProgressUpdate
    | HangReported
    | RunFinished
    | MemorySampled
    | MemoryWarning
    | RunRestarting
    | CheckpointWriting
    | CheckpointSaved
    | StepsMeasured
)

# What the supervisor's inbox hands on from the ranks' pipes (launch/supervise/): on a cluster=
# launch each node relays exactly these to the notebook (clusters/node.py, and SLURM's events file),
# so the cell, the RunView and the result see a cluster run as they see a local one.
WORKER_EVENTS: tuple[type, ...] = (
    OutputLine,
    WorkerDisplay,
    BarUpdate,
    MetricLogged,
    ProgressUpdate,
    StepsMeasured,
    MemorySampled,
    MemoryWarning,
    CheckpointWriting,
    CheckpointSaved,
)
# The launcher's own account of a run, which a node keeps: the notebook's ClusterRun announces the
# run's start and end itself; a node runs one attempt (no restarts), and its hang report is not
# relayed (a timeout's stacks come back in the node's outcome).
LAUNCHER_EVENTS: tuple[type, ...] = (RunStarted, RunFinished, HangReported, RunRestarting)


class Observer(Protocol):
    def __call__(self, event: Event) -> None: ...


def poll_hooks_ask_stop(hooks: Iterable[Callable[[], Any]]) -> bool:
    """Run every poll hook (the RunView's pump, a cell's own); True when one asks to stop the run.

    Every hook runs each turn even after one asked (each pumps its own events), and a hook that
    raises is ignored: a broken widget must not break the launch it watches.
    """
    requested = False
    for hook in hooks:
        try:
            requested = bool(hook()) or requested
        except Exception:
            pass
    return requested


def tick(observers: Any) -> None:
    """Give observers that buffer (the cell printer's `tick()`) a chance to draw while ranks are quiet."""
    for observer in tuple(observers):
        draw = getattr(observer, "tick", None)
        if draw is not None:
            try:
                draw()
            except Exception:  # noqa: BLE001 - drawing must never break a run
                pass
