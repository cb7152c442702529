"""What the workers send, read into the run's record and handed to observers as events.

Output arrives as raw bytes on each worker's stdout/stderr pipe and is split into lines; messages
(results, failures, metrics, progress, memory samples) arrive on its message pipe. Nothing a
worker sends can break the launch: a return value or metric the notebook cannot unpickle is
reported or dropped with a warning, and every other rank's values are kept.
"""

from __future__ import annotations

import os
import time
import traceback
import warnings
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from ..cell.traceback_view import fill_source
from ..events import (
    BarUpdate,
    CheckpointSaved,
    CheckpointWriting,
    MetricLogged,
    OutputLine,
    ProgressUpdate,
    StepsMeasured,
    Stream,
    WorkerDisplay,
)
from ..result import RankFailure, RunRecord, metric_row
from ..worker import channel
from ..worker.entry import UNSENT_ERROR_MARK
from ..worker.relay import DISPLAY_MARK
from .display_order import DisplayOrder
from .memory_watch import MemoryWatch
from .processes import Worker

MARK_WAIT_SECONDS = 1.0
TAIL_LINES = 20  # of a rank's output, shown when it died without a Python exception


class Inbox:
    """Reads every worker's pipes into `record`; `emit` hands events on, `on_failure` starts the stop."""

    def __init__(
        self,
        record: RunRecord,
        emit: Callable[[Any], None],
        on_failure: Callable[[], None],
        stopped_by_launcher: Callable[[int], bool],
    ) -> None:
        self.record = record
        self.emit = emit
        self.on_failure = on_failure
        self.stopped_by_launcher = stopped_by_launcher
        self._warned_metrics: set[str] = set()
        self.memory = MemoryWatch()  # result.memory, and the warning before the OOM killer
        self.displays = DisplayOrder(emit)
        record.memory = self.memory.record

    # ------------------------------------------------------------------ output
    def read_output(self, worker: Worker, stream: Stream) -> bool:
        """Read what is there; False once the pipe reached end of file (and its last line was emitted)."""
        conn = worker.out if stream == "stdout" else worker.err
        if not conn.poll(0):  # read already: a display message catches up on output first (catch_up)
            return True
        try:
            chunk = os.read(conn.fileno(), 65536)
        except OSError:
            chunk = b""
        if not chunk:
            self._emit_lines(worker, stream, worker.partial[stream], final=True)
            worker.partial[stream] = b""
            return False
        if stream == "stderr":
            worker.last_stderr = time.monotonic()
        worker.partial[stream] = self._emit_lines(worker, stream, worker.partial[stream] + chunk)
        return True

    def _emit_lines(self, worker: Worker, stream: Stream, data: bytes, final: bool = False) -> bytes:
        """Complete lines go to the record and the observers; a line rewritten with "\r" (a plain
        progress bar, `print(..., end="\r")`) counts as what it shows last, and while it has no
        newline yet, observers get it as a live line."""
        *complete, rest = data.split(b"\n")
        if final and rest:
            complete.append(rest)
            rest = b""
        for raw in complete:
            text = _shown(raw).decode("utf-8", errors="replace")
            if text.startswith(DISPLAY_MARK):
                self._display_here(worker, text)
                continue
            worker.lines.append(text)
            self.emit(OutputLine(worker.rank, stream, text))
        if b"\r" in rest:
            shown = _shown(rest)
            rest = shown + b"\r" if rest.endswith(b"\r") else shown
            if shown.strip():
                self.emit(OutputLine(worker.rank, stream, shown.decode("utf-8", errors="replace"), live=True))
        return rest

    def _display_here(self, worker: Worker, mark: str) -> None:
        """The mark of a display: show it now, after the lines before it (its message is sent right
        after the mark, so wait for it briefly)."""
        try:
            seq = int(mark[len(DISPLAY_MARK) :])
        except ValueError:
            return
        deadline = time.monotonic() + MARK_WAIT_SECONDS
        while not self.displays.has(worker.rank, seq) and not worker.msg.closed:
            if not worker.msg.poll(max(0.0, deadline - time.monotonic())) or not self.read_message(worker):
                break
        self.displays.mark(worker.rank, seq)

    def relayed(self, worker: Worker, kind: str, payload: Any) -> bool:
        """A display, clear or progress-bar message (launch/worker/relay.py); False for other kinds."""
        if kind == channel.DISPLAY:
            event = WorkerDisplay(
                worker.rank, payload["data"], payload["metadata"], payload["display_id"], payload["update"]
            )
            self.displays.arrived(worker.rank, payload["seq"], event)
        elif kind == channel.CLEAR:
            self.displays.arrived(
                worker.rank, payload["seq"], WorkerDisplay(worker.rank, {}, clear=True, wait=payload["wait"])
            )
        elif kind == channel.BAR:
            self.emit(BarUpdate(worker.rank, **payload))
        else:
            return False
        return True

    def drain(self, worker: Worker) -> None:
        """Read whatever an exited worker left in its pipes (without waiting on anything it started)."""
        pipes: tuple[tuple[Stream, Connection], ...] = (("stdout", worker.out), ("stderr", worker.err))
        for stream, conn in pipes:
            while not conn.closed and conn.poll(0):
                if not self.read_output(worker, stream):
                    break
            if worker.partial[stream]:
                self._emit_lines(worker, stream, worker.partial[stream], final=True)
                worker.partial[stream] = b""
        while not worker.msg.closed and worker.msg.poll(0):
            if not self.read_message(worker):
                break
        self.displays.flush(worker.rank)  # a display whose mark never came (stdout redirected) still shows

    # ---------------------------------------------------------------- messages
    def read_message(self, worker: Worker) -> bool:
        """Handle one message; False once the message pipe is closed."""
        try:
            kind, payload = channel.decode(worker.msg.recv_bytes())
        except (EOFError, OSError):
            return False
        if kind == channel.STARTED:
            worker.started = True
        elif kind == channel.RESULT:
            worker.reported = True
            self._take_result(worker, payload)
        elif kind == channel.ERROR:
            worker.reported = True
            self._add_failure(worker, payload)
        elif kind == channel.METRIC:
            self._take_metric(worker, payload)
        elif kind in (channel.CHECKPOINT, channel.CHECKPOINT_WRITING):
            self.take_checkpoint(worker, kind, payload)
        elif kind == channel.PREEMPTED:
            self.record.preempted[worker.rank] = payload.get("signal")
        elif kind == channel.PROGRESS:
            self.emit(
                ProgressUpdate(
                    worker.rank, payload["step"], payload.get("total"), payload["time"], payload.get("epoch")
                )
            )
        elif kind == channel.PERFORMANCE:
            self.record.performance[worker.rank] = payload
            self.emit(StepsMeasured(worker.rank, payload))
        elif kind == channel.MEMORY:
            for event in self.memory.ingest(worker.rank, payload):
                self.emit(event)
        else:
            self.relayed(worker, kind, payload)
        return True

    def take_checkpoint(self, worker: Worker, kind: str, payload: dict[str, Any]) -> None:
        """A save_state folder completed (result.checkpoints), or a rank's background write moved on."""
        if kind == channel.CHECKPOINT_WRITING:
            fields = ("step", "path", "written_bytes", "staged_bytes", "state", "time")
            self.emit(CheckpointWriting(worker.rank, **{name: payload[name] for name in fields}))
            return
        self.record.checkpoint = payload["path"]
        self.record.checkpoints.append(dict(payload))
        saved = ("path", "step", "blocked_s", "total_s", "background")
        self.emit(CheckpointSaved(**{name: payload[name] for name in saved}))

    def _take_result(self, worker: Worker, payload: dict[str, Any]) -> None:
        try:
            self.record.values[worker.rank] = channel.load_pickled(payload["pickled"])
        except Exception as exc:
            # Not a reason to stop the others: they are finishing too, and their values are kept.
            self.record.failures.append(
                RankFailure(
                    rank=worker.rank,
                    exc_type=type(exc).__name__,
                    message=str(exc),
                    traceback="".join(traceback.format_exception(exc)),
                    time=time.monotonic(),
                    exception=exc,
                    description=(
                        f"rank {worker.rank} returned a {payload['type']} that cannot be unpickled here "
                        f"({type(exc).__name__}: {exc}); the other ranks' values are in `.values`. Return plain "
                        "data (numbers, tensors, dicts, lists) or types this process can import"
                    ),
                )
            )

    def _take_metric(self, worker: Worker, payload: dict[str, Any]) -> None:
        values = {}
        for key, blob in payload["values"].items():
            try:
                values[key] = channel.load_pickled(blob)
            except Exception as exc:
                self._warn_dropped(worker.rank, key, exc)
        if payload["values"] and not values:
            return  # nothing of it could be loaded: no empty row
        step, at = payload.get("step"), payload["time"]
        self.record.metrics.append(metric_row(worker.rank, step, at, values))
        self.emit(MetricLogged(worker.rank, step, values, at))

    def _warn_dropped(self, rank: int, key: str, exc: Exception) -> None:
        if key in self._warned_metrics:
            return
        self._warned_metrics.add(key)
        warnings.warn(
            f"The metric {key!r} logged by rank {rank} cannot be unpickled here ({type(exc).__name__}: {exc}); "
            "it is left out of result.metrics (also later values of it, without another warning). "
            "Log numbers or tensors.",
            RuntimeWarning,
            stacklevel=2,
        )

    def _add_failure(self, worker: Worker, info: dict[str, Any]) -> None:
        exception = channel.rebuild_exception(info)  # None: the traceback text still tells the story
        traceback_text = fill_source(info["traceback"])
        failure = RankFailure(
            rank=worker.rank,
            exc_type=info["exc_type"],
            message=info["message"],
            traceback=traceback_text,
            time=info["time"],
            exception=exception,
            secondary=info["secondary"] or self.stopped_by_launcher(worker.rank),
            frames=info.get("frames"),
        )
        for line in traceback_text.rstrip("\n").split("\n"):
            worker.lines.append(line)
        self.record.failures.append(failure)
        self.on_failure()


def _shown(raw: bytes) -> bytes:
    """What a terminal shows of a line rewritten with "\r": its last non-empty part."""
    if b"\r" not in raw:
        return raw
    parts = [part for part in raw.split(b"\r") if part.strip()]
    return parts[-1] if parts else b""


def output_tail(lines: list[str]) -> str:
    """The last lines of a rank that died without reporting; all of a traceback it printed itself
    because its error could not be sent (worker/entry.py)."""
    for index in range(len(lines) - 1, max(-1, len(lines) - 1000), -1):
        if lines[index].startswith(UNSENT_ERROR_MARK):
            return "\n".join(lines[index:])
    return "\n".join(lines[-TAIL_LINES:])
