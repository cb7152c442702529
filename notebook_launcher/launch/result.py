"""What a launch gives back: every rank's value and output, or an error that names the culprit."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, overload

from ..errors import NotebookLauncherError
from .cell.rendering import render, shown_traceback

STARTUP_HINT = (
    "The worker died while starting, before your function ran (its own message went to this process's "
    "terminal, not the notebook). With start_method='spawn' in a script, every worker re-imports the "
    'script: put the launch under `if __name__ == "__main__":`. Otherwise check that the script\'s '
    "imports work in a fresh interpreter."
)


@dataclass(eq=False, repr=False)
class LaunchResult(Sequence):
    """Every local rank's return value in rank order, plus each rank's output and logged metrics.

    `result[0]` is the first rank's value; `result.logs[rank]` that rank's captured stdout+stderr;
    `result.metrics` one row per `accelerator.log()` call: {"rank", "step", "time", **values}
    (see metric_row for logged keys named like those three);
    `result.memory[rank]` that rank's memory samples (see launch/supervise/memory_watch.py), with
    `result.memory.peak_rss(rank)` and `result.memory.warnings`;
    `result.performance` each rank's step breakdown and the straggler verdict (estimate/performance.py).
    """

    values: list[Any]
    _: KW_ONLY
    ranks: list[int]
    logs: dict[int, str]
    metrics: list[dict[str, Any]]
    duration: float
    start_method: str
    world_size: int
    memory: dict[int, list[dict[str, Any]]] | None = None
    restarts: int = field(default=0, init=False)  # how many times the ranks were started again (max_restarts)
    failures: list[Exception] = field(default_factory=list, init=False)  # what ended each earlier attempt
    performance: Any = field(default=None, init=False)  # an estimate.performance.PerformanceReport
    # each save_state that completed, in order: {"path", "step", "blocked_s" (training waited),
    # "total_s" (call to folder published), "background" (async_save)}
    checkpoints: list[dict[str, Any]] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        if self.memory is None:
            self.memory = {}

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...
    def __getitem__(self, index):
        return self.values[index]

    def __len__(self) -> int:
        return len(self.values)

    def __repr__(self) -> str:
        return (
            f"LaunchResult({self.values!r}, ranks={self.ranks}, duration={self.duration:.2f}s, "
            f"start_method={self.start_method!r})"
        )

    def metrics_for(self, rank: int = 0) -> list[dict[str, Any]]:
        """The metric rows one rank logged, in order."""
        return [row for row in self.metrics if row["rank"] == rank]


ROW_FIELDS = ("rank", "step", "time")
USER_KEY_PREFIX = "user_"


def metric_row(rank: int, step: int | None, time: float, values: dict[str, Any]) -> dict[str, Any]:
    """One row of `result.metrics`. The row's own fields keep their names; a logged key that has one
    of those names (`accelerator.log({"step": 5})`) is kept too, as `user_step`, so nothing is lost."""
    row: dict[str, Any] = {"rank": rank, "step": step, "time": time}
    for key, value in values.items():
        name = key
        while name in row:
            name = USER_KEY_PREFIX + name
        row[name] = value
    return row


@dataclass
class RankFailure:
    """One rank's failure as seen by the parent."""

    rank: int
    exitcode: int | None = None
    exc_type: str | None = None
    message: str | None = None
    traceback: str | None = None
    time: float = 0.0
    exception: BaseException | None = None
    output_tail: str = ""
    secondary: bool = False  # a symptom of another rank's failure (peer closed, aborted collective)
    description: str | None = None  # what happened, when it is not "raised" or "exited"
    frames: list[dict[str, Any]] | None = None  # the traceback as data (launch/worker/frames.py)

    @property
    def full_traceback(self) -> str | None:
        """Every frame, as Python prints it, plain text (the cell folds the libraries' frames)."""
        return self.traceback

    def shown_traceback(self, colour: bool | None = None) -> str | None:
        """The traceback as the cell shows it: the user's frames with their source, library frames
        folded; ANSI colours when `colour` (default: when this process's cell or terminal shows them)."""
        if not self.traceback:
            return None
        return shown_traceback(self.traceback, self.frames, colour)

    def finish_extra(self) -> dict[str, Any]:
        """What RunFinished carries about this failure: the plain text, and the folded, coloured view
        a RunView shows (its panes turn the colours into HTML)."""
        return {
            "traceback": self.traceback or self.output_tail,
            "shown_traceback": self.shown_traceback(True),
        }

    @property
    def signal_name(self) -> str | None:
        if self.exitcode is None or self.exitcode >= 0:
            return None
        import signal

        try:
            return signal.Signals(-self.exitcode).name
        except ValueError:
            return f"signal {-self.exitcode}"

    def summary(self) -> str:
        if self.description:
            return self.description
        if self.exc_type:
            return f"rank {self.rank} raised {self.exc_type}: {self.message}"
        if self.signal_name:
            return f"rank {self.rank} was killed by {self.signal_name}"
        return f"rank {self.rank} exited with code {self.exitcode} without raising a Python exception"


def _elastic_flavour() -> type[WorkerError] | None:
    """WorkerError's ChildFailedError flavour, once this process has loaded torch (child_failed.py)."""
    if WorkerError.flavour is None and "torch" in sys.modules:
        from .child_failed import elastic_subclass

        WorkerError.flavour = elastic_subclass(WorkerError)
    return WorkerError.flavour


class WorkerError(NotebookLauncherError, RuntimeError):
    """A worker failed. `.rank`, `.exitcode`, `.exc_type`, `.traceback` describe the first failure.

    `.exception` (also `__cause__`) is the worker's exception rebuilt here when it could be unpickled,
    so `except` on it works; `.values` holds the return values of the ranks that did finish. The cell
    folds library frames; `.full_traceback` (= `.traceback`, also in str()) has every frame.

    Made as child_failed.py's WorkerError, a subclass that is also torch elastic's ChildFailedError
    (what Accelerate's notebook_launcher raises), whenever this process has loaded torch.
    """

    # child_failed.py's subclass (also a ChildFailedError), built the first time a WorkerError is made
    # in a process that has loaded torch; None until then, and without torch.distributed
    flavour: type[WorkerError] | None = None

    def __new__(cls, *args: Any, **kwargs: Any) -> WorkerError:
        if cls is WorkerError:
            cls = _elastic_flavour() or cls
        return super().__new__(cls, *args)

    def __init__(
        self,
        failure: RankFailure,
        others: list[RankFailure],
        logs: dict[int, str] | None = None,
        values: dict[int, Any] | None = None,
    ):
        self.failure = failure
        self.others = others
        self.rank = failure.rank
        self.exitcode = failure.exitcode
        self.signal = failure.signal_name
        self.exc_type = failure.exc_type
        self.remote_traceback = failure.traceback
        self.traceback = failure.traceback
        self.exception = failure.exception
        self.logs = logs or {}
        self.values = dict(values or {})
        self.restart_note: str | None = None  # why this failure was not restarted (max_restarts)
        super().__init__(self._message())
        if failure.exception is not None:
            self.__cause__ = failure.exception  # also sets __suppress_context__

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled with its constructor's arguments (a cluster node sends it; args is only the text)."""
        state = {k: v for k, v in self.__dict__.items() if k != "failures"}
        made_as = WorkerError if type(self) is WorkerError.flavour else type(self)  # made again the same way
        return (made_as, (self.failure, self.others, self.logs, self.values), state)

    def __setstate__(self, state: dict[str, Any] | None) -> None:  # BaseException's signature
        self.__dict__.update(state or {})
        self.args = (self._message(),)  # with the restart note the sender had added

    def _message(self) -> str:
        parts = [f"{self.failure.summary()}."]
        parts += [f"\n--- {title} ---\n{text.rstrip()}" for title, text in self._sections()]
        if self.others:
            parts.append(f"\n{self._others()}")
        if self.restart_note:
            parts.append(f"\n{self.restart_note}")
        return "\n".join(parts)

    def explain_no_restart(self, note: str) -> None:
        """Say why the launcher did not restart after this failure (in str() and in the cell)."""
        self.restart_note = note
        self.args = (self._message(),)

    @property
    def full_traceback(self) -> str | None:
        """The failing rank's traceback with every frame, plain text."""
        return self.failure.full_traceback

    def shown_traceback(self, colour: bool | None = None) -> str | None:
        """The failing rank's traceback as the cell shows it (RankFailure.shown_traceback)."""
        return self.failure.shown_traceback(colour)

    def _sections(self, shown: bool = False) -> list[tuple[str, str]]:
        if self.failure.traceback:
            text = self.failure.shown_traceback() if shown else self.failure.traceback
            return [(f"traceback of rank {self.rank}", text or "")]
        if self.failure.output_tail:
            return [(f"last output of rank {self.rank}", self.failure.output_tail)]
        return []

    def _others(self) -> str:
        listed = "\n".join(f"  - {o.summary()}" for o in self.others)
        return f"Also failed (probably as a consequence):\n{listed}"

    def _render_traceback_(self) -> list[str]:
        """What IPython shows in the cell: our one line and the worker's own traceback."""
        lines = render(type(self).__name__, self.failure.summary(), self._sections(shown=True))
        return (
            lines
            + ([self._others()] if self.others else [])
            + ([self.restart_note] if self.restart_note else [])
        )


def _where(stacks: dict[int, str]) -> list[tuple[str, str]]:
    return [(f"where rank {rank} was", text) for rank, text in stacks.items() if text.strip()]


def _where_text(stacks: dict[int, str]) -> str:
    """The same, as plain text after an error's message (str(error), logs)."""
    return "".join(f"\n--- {title} ---\n{text.strip()}" for title, text in _where(stacks))


class LaunchTimeout(NotebookLauncherError, TimeoutError):
    """The launch ran past `timeout=`; every worker was stopped."""

    def __init__(
        self, timeout: float, running: list[int], stacks: dict[int, str] | None = None, report: Any = None
    ):
        self.timeout = timeout
        self.running_ranks = running
        self.stacks = stacks or {}
        self.report = report  # the HangReport made at the timeout (hang_report.py)
        self.summary = (
            f"The launch ran longer than timeout={timeout}s; ranks {running} were still running and have been "
            "stopped. Raise timeout= or look for a rank stuck in a collective (e.g. one rank skipping a barrier)."
        )
        if report is not None:
            self.summary += f"\nVerdict: {report.verdict}"
        super().__init__(self.summary + _where_text(self.stacks))

    def _render_traceback_(self) -> list[str]:
        return render(type(self).__name__, self.summary, _where(self.stacks))


class RendezvousStalled(NotebookLauncherError, TimeoutError):
    """Every rank of a one-machine launch waited inside init_process_group for `seconds`: the process
    group never formed (in each of `attempts` starts; launch/supervise/rendezvous_watch.py)."""

    def __init__(
        self, seconds: float, stacks: dict[int, str] | None = None, report: Any = None, attempts: int = 1
    ):
        self.seconds = seconds
        self.stacks = stacks or {}
        self.report = report
        self.attempts = attempts
        tries = "" if attempts == 1 else f" in each of {attempts} starts"
        self.summary = (
            f"Every rank waited in the rendezvous (init_process_group) for more than {seconds:g}s on this one "
            f"machine{tries}: the process group did not form, and every rank has been stopped. Look at where "
            "each rank waited (below). Seen so far: a rank held in torch's TCPStore connect by a reverse DNS lookup "
            "that the DNS server never answers (code that calls init_process_group itself connects over TCP); a "
            "GLOO_SOCKET_IFNAME that does not route to the main address would do the same. NOTEBOOK_LAUNCHER_RENDEZVOUS_STALL_SECONDS sets the wait (0: never give up)."
        )
        super().__init__(self.summary + _where_text(self.stacks))

    def _render_traceback_(self) -> list[str]:
        return render(type(self).__name__, self.summary, _where(self.stacks))


class LaunchStopped(NotebookLauncherError, RuntimeError):
    """The launch was stopped on request (Stop button or handle.stop()); every worker is gone.

    `.stacks[rank]` shows where each running rank was when it was stopped.
    """

    def __init__(self, message: str, stacks: dict[int, str] | None = None):
        self.summary = message
        self.stacks = stacks or {}
        super().__init__(message)

    def _render_traceback_(self) -> list[str]:
        return render(type(self).__name__, self.summary, _where(self.stacks))


class LaunchPreempted(NotebookLauncherError, RuntimeError):
    """SIGTERM or SIGUSR1 asked the run to stop; the ranks finished their step and returned.

    `.checkpoint` is the last folder save_state() completed (None if the run saved none), the one to
    resume from with load_state(); `.values` holds what the ranks returned, `.signal` what asked.
    """

    def __init__(self, checkpoint: str | None, values: dict[int, Any], signal: str | None, where: str):
        self.checkpoint = checkpoint
        self.values = values
        self.signal = signal
        self.restarts = 0  # as on LaunchResult: set by the run under max_restarts (faults/restarts.py)
        self.failures: list[Exception] = []  # what ended each earlier attempt
        saved = f"last checkpoint: {checkpoint}" if checkpoint else "no checkpoint was saved"
        self.summary = f"the run was preempted ({signal or 'a preemption signal'} to {where}); {saved}."
        super().__init__(self.summary)

    def _render_traceback_(self) -> list[str]:
        return render(type(self).__name__, self.summary, [])


class LaunchInterrupted(KeyboardInterrupt):
    """Ctrl-C or the notebook's interrupt button stopped a launch; every worker is gone.

    A KeyboardInterrupt (so `except KeyboardInterrupt` works as always) that also says where each
    running rank was, in `.stacks` and in the cell.
    """

    def __init__(self, stacks: dict[int, str] | None = None):
        self.summary = "the launch was interrupted; every worker has been stopped."
        self.stacks = stacks or {}
        super().__init__(self.summary)

    def _render_traceback_(self) -> list[str]:
        return render("KeyboardInterrupt", self.summary, _where(self.stacks))


@dataclass
class RunRecord:
    """Everything the supervisor collected while the run went on."""

    values: dict[int, Any] = field(default_factory=dict)
    failures: list[RankFailure] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    exitcodes: dict[int, int] = field(default_factory=dict)
    checkpoint: str | None = None  # the last folder save_state() completed
    checkpoints: list[dict[str, Any]] = field(default_factory=list)  # each one, as result.checkpoints
    preempted: dict[int, str | None] = field(default_factory=dict)  # rank -> the signal it got (if it did)
    memory: dict[int, list[dict[str, Any]]] = field(default_factory=dict)  # a MemoryRecord
    performance: dict[int, dict[str, Any]] = field(default_factory=dict)  # rank -> its step clock
