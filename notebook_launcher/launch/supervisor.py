"""Start the workers, watch them, collect what they send, and always leave nothing behind.

One loop in the calling thread waits (select) on every worker's output pipes, message pipe and
process sentinel at once, so output streams live, a failure is seen within milliseconds even when
the other ranks sit in a collective, and Ctrl-C / the notebook's stop button lands here.
"""

from __future__ import annotations

import collections
import os
import selectors
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from . import channel
from .events import MetricLogged, OutputLine, ProgressUpdate, RunFinished, RunStarted
from .forksafety import HelperProcesses, release_openmp_threads
from .planning import LaunchPlan
from .result import STARTUP_HINT, LaunchStopped, LaunchTimeout, RankFailure, RunRecord, WorkerError
from .stacks import with_source_lines
from .worker import STACK_DUMP_SIGNAL, run_worker

GRACE_SECONDS = 3.0
POLL_SECONDS = 0.05
MAX_LOG_LINES = 200_000
STACK_DUMP_SECONDS = 0.5


@dataclass
class _Worker:
    rank: int
    process: Any
    out: Connection
    err: Connection
    msg: Connection
    partial: dict[str, bytes] = field(default_factory=lambda: {"stdout": b"", "stderr": b""})
    lines: collections.deque = field(default_factory=lambda: collections.deque(maxlen=MAX_LOG_LINES))
    exited: bool = False
    started: bool = False  # reached our worker code (a spawned child can die while bootstrapping)
    reported: bool = False  # sent a result or an error


class Supervisor:
    def __init__(
        self,
        plan: LaunchPlan,
        observers: Sequence[Callable[[Any], None]] = (),
        poll_hooks: Sequence[Callable[[], Any]] = (),
        should_stop: Callable[[], bool] | None = None,
    ) -> None:
        self.plan = plan
        self.observers = list(observers)
        self.poll_hooks = list(poll_hooks)
        self.should_stop = should_stop or (lambda: False)
        self.record = RunRecord()
        self.workers: list[_Worker] = []
        self.selector = selectors.DefaultSelector()
        self.stopping_since: float | None = None
        self.stopped_by_us: set[int] = set()
        self.started = 0.0
        self.helpers: HelperProcesses | None = None

    # ------------------------------------------------------------------ public
    def run(self) -> RunRecord:
        """Run to completion; raise WorkerError / LaunchTimeout / LaunchStopped / KeyboardInterrupt."""
        self.started = time.monotonic()
        status, error = "failed", None
        try:
            self._start_all()
            self._emit(
                RunStarted(
                    self.plan.world_size,
                    tuple(w.rank for w in self.workers),
                    self.plan.start_method,
                    self.plan.config,
                )
            )
            outcome = self._loop()
            status = outcome
            if outcome == "timeout":
                running = [w.rank for w in self.workers if w.rank in self._running_at_stop]
                raise LaunchTimeout(self.plan.timeout, running, self.stacks())
            if outcome == "stopped":
                raise LaunchStopped("The launch was stopped on request; all workers have been terminated.")
            if self.record.failures:
                status = "failed"
                raise self._worker_error()
            status = "done"
            return self.record
        except KeyboardInterrupt:
            status = "stopped"
            error = "interrupted (KeyboardInterrupt)"
            raise
        except WorkerError as exc:
            error = exc.failure.summary()
            raise
        finally:
            self._shutdown()
            primary = self._primary() if self.record.failures else None
            extra = {"traceback": primary.traceback or primary.output_tail} if primary else {}
            failed = primary.rank if primary else None
            self._emit(RunFinished(status, time.monotonic() - self.started, failed, error, extra))

    @property
    def logs(self) -> dict[int, str]:
        return {w.rank: "".join(line + "\n" for line in w.lines) for w in self.workers}

    # ---------------------------------------------------------------- starting
    def _start_all(self) -> None:
        self.plan.preflight(self.should_stop)  # e.g. wait until the main machine's port answers
        ctx = self.plan.context
        if self.plan.start_method == "fork":
            release_openmp_threads()
        else:
            self.helpers = HelperProcesses()
        for spec in self.plan.specs:
            out_r, out_w = ctx.Pipe(duplex=False)
            err_r, err_w = ctx.Pipe(duplex=False)
            msg_r, msg_w = ctx.Pipe(duplex=False)
            process = ctx.Process(
                target=run_worker,
                args=(spec, self.plan.target, out_w, err_w, msg_w),
                name=f"notebook_launcher-rank{spec.rank}",
                daemon=False,
            )
            worker = _Worker(spec.rank, process, out_r, err_r, msg_r)
            self.workers.append(worker)
            try:
                process.start()
            finally:
                for conn in (out_w, err_w, msg_w):
                    conn.close()
            self.selector.register(out_r.fileno(), selectors.EVENT_READ, (worker, "stdout"))
            self.selector.register(err_r.fileno(), selectors.EVENT_READ, (worker, "stderr"))
            self.selector.register(msg_r.fileno(), selectors.EVENT_READ, (worker, "msg"))
            self.selector.register(process.sentinel, selectors.EVENT_READ, (worker, "exit"))

    # -------------------------------------------------------------------- loop
    def _loop(self) -> str:
        deadline = None if self.plan.timeout is None else self.started + self.plan.timeout
        self._running_at_stop: list[int] = []
        while not all(w.exited for w in self.workers):
            for key, _ in self.selector.select(POLL_SECONDS):
                worker, what = key.data
                self._handle(worker, what, key.fd)
            if self.stopping_since is None:
                if deadline is not None and time.monotonic() > deadline:
                    self._dump_stacks()
                    self._begin_stop()
                    return self._finish_stop("timeout")
                if self.should_stop() or self._poll_requested_stop():
                    self._begin_stop()
                    return self._finish_stop("stopped")
            elif time.monotonic() - self.stopping_since > GRACE_SECONDS:
                self._kill_remaining()
        return "done"

    def _finish_stop(self, outcome: str) -> str:
        while not all(w.exited for w in self.workers):
            for key, _ in self.selector.select(POLL_SECONDS):
                worker, what = key.data
                self._handle(worker, what, key.fd)
            if time.monotonic() - self.stopping_since > GRACE_SECONDS:
                self._kill_remaining()
        return outcome

    def _dump_stacks(self) -> None:
        """Ask every running worker for its Python stack (faulthandler) so a hang shows where it is."""
        running = [w for w in self.workers if not w.exited]
        self._stack_marks = {w.rank: len(w.lines) for w in running}
        for worker in running:
            _signal(worker.process, STACK_DUMP_SIGNAL)
        until = time.monotonic() + STACK_DUMP_SECONDS
        while time.monotonic() < until:
            for key, _ in self.selector.select(POLL_SECONDS):
                worker, what = key.data
                if what in ("stdout", "stderr"):
                    self._handle(worker, what, key.fd)

    def stacks(self) -> dict[int, str]:
        """What each hung rank printed after the stack-dump request."""
        marks = getattr(self, "_stack_marks", {})
        by_rank = {w.rank: w for w in self.workers}
        return {
            rank: with_source_lines("\n".join(list(by_rank[rank].lines)[mark:]))
            for rank, mark in marks.items()
        }

    def _poll_requested_stop(self) -> bool:
        requested = False
        for hook in self.poll_hooks:
            try:
                requested = bool(hook()) or requested
            except Exception:
                pass
        return requested

    def _handle(self, worker: _Worker, what: str, fd: int) -> None:
        if what in ("stdout", "stderr"):
            self._read_output(worker, what, fd)
        elif what == "msg":
            self._read_message(worker, fd)
        else:
            self._on_exit(worker, fd)

    def _read_output(self, worker: _Worker, stream: str, fd: int) -> None:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            chunk = b""
        if not chunk:
            self._unregister(fd)
            (worker.out if stream == "stdout" else worker.err).close()
            self._emit_lines(worker, stream, worker.partial[stream], final=True)
            worker.partial[stream] = b""
            return
        worker.partial[stream] = self._emit_lines(worker, stream, worker.partial[stream] + chunk)

    def _emit_lines(self, worker: _Worker, stream: str, data: bytes, final: bool = False) -> bytes:
        *complete, rest = data.split(b"\n")
        if final and rest:
            complete.append(rest)
            rest = b""
        for raw in complete:
            text = raw.decode("utf-8", errors="replace")
            worker.lines.append(text)
            self._emit(OutputLine(worker.rank, stream, text))
        return rest

    def _read_message(self, worker: _Worker, fd: int) -> None:
        try:
            kind, payload = channel.decode(worker.msg.recv_bytes())
        except (EOFError, OSError):
            self._unregister(fd)
            worker.msg.close()
            return
        if kind == channel.STARTED:
            worker.started = True
        elif kind == channel.RESULT:
            self.record.values[worker.rank] = channel.load_pickled(payload)
            worker.reported = True
        elif kind == channel.ERROR:
            worker.reported = True
            self._add_failure(worker, payload)
        elif kind == channel.METRIC:
            row = {
                "rank": worker.rank,
                "step": payload.get("step"),
                "time": payload["time"],
                **payload["values"],
            }
            self.record.metrics.append(row)
            self._emit(
                MetricLogged(worker.rank, payload.get("step"), dict(payload["values"]), payload["time"])
            )
        elif kind == channel.PROGRESS:
            self._emit(
                ProgressUpdate(
                    worker.rank, payload["step"], payload.get("total"), payload["time"], payload.get("epoch")
                )
            )

    def _add_failure(self, worker: _Worker, info: dict[str, Any]) -> None:
        exception = None
        try:
            exception = channel.load_pickled(info.get("pickled"))
        except Exception:
            pass
        failure = RankFailure(
            rank=worker.rank,
            exc_type=info["exc_type"],
            message=info["message"],
            traceback=info["traceback"],
            time=info["time"],
            exception=exception,
            secondary=info["secondary"] or worker.rank in self.stopped_by_us,
        )
        for line in failure.traceback.rstrip("\n").split("\n"):
            worker.lines.append(line)
        self.record.failures.append(failure)
        self._begin_stop()

    def _on_exit(self, worker: _Worker, fd: int) -> None:
        self._unregister(fd)
        self._drain(worker)
        worker.exited = True
        worker.process.join(5)  # the sentinel can fire a moment before the exit status is collectable
        code = worker.process.exitcode
        self.record.exitcodes[worker.rank] = code
        known = next((f for f in self.record.failures if f.rank == worker.rank), None)
        if known is not None:
            known.exitcode = code
            return
        if worker.rank in self.stopped_by_us or (code == 0 and worker.reported):
            return
        tail = "\n".join(list(worker.lines)[-20:])
        if not worker.started and self.plan.start_method != "fork":
            tail = (tail + "\n" if tail else "") + STARTUP_HINT
        self.record.failures.append(
            RankFailure(rank=worker.rank, exitcode=code, time=time.monotonic(), output_tail=tail)
        )
        self._begin_stop()

    def _drain(self, worker: _Worker) -> None:
        """Read whatever an exited worker left in its pipes (without waiting on grandchildren)."""
        for stream, conn in (("stdout", worker.out), ("stderr", worker.err)):
            while not conn.closed and conn.poll(0):
                try:
                    chunk = os.read(conn.fileno(), 65536)
                except OSError:
                    break
                if not chunk:
                    break
                worker.partial[stream] = self._emit_lines(worker, stream, worker.partial[stream] + chunk)
            if worker.partial[stream]:
                self._emit_lines(worker, stream, worker.partial[stream], final=True)
                worker.partial[stream] = b""
        while not worker.msg.closed and worker.msg.poll(0):
            self._read_message(worker, worker.msg.fileno())

    # ---------------------------------------------------------------- stopping
    def _begin_stop(self) -> None:
        if self.stopping_since is not None:
            return
        self.stopping_since = time.monotonic()
        self._running_at_stop = [w.rank for w in self.workers if not w.exited]
        for worker in self.workers:
            if not worker.exited and worker.process._popen is not None and worker.process.is_alive():
                self.stopped_by_us.add(worker.rank)
                _signal(worker.process, signal.SIGTERM)

    def _kill_remaining(self) -> None:
        for worker in self.workers:
            if not worker.exited and worker.process._popen is not None and worker.process.is_alive():
                _signal(worker.process, signal.SIGKILL)

    def _shutdown(self) -> None:
        """Whatever happened: no process left, every pipe closed, the selector closed."""
        try:
            self._begin_stop()
            deadline = time.monotonic() + GRACE_SECONDS
            for worker in self.workers:
                if worker.process._popen is not None:
                    worker.process.join(max(0.0, deadline - time.monotonic()))
        except KeyboardInterrupt:
            pass
        finally:
            for worker in self.workers:
                started = worker.process._popen is not None
                if started and worker.process.is_alive():
                    _signal(worker.process, signal.SIGKILL)
                    worker.process.join()
                worker.exited = True
                for conn in (worker.out, worker.err, worker.msg):
                    conn.close()
                if started:
                    worker.process.close()
            self.selector.close()
            self.plan.store = None  # closes the rendezvous port
            if self.helpers is not None:
                self.helpers.stop_new()

    def _unregister(self, fd: int) -> None:
        try:
            self.selector.unregister(fd)
        except (KeyError, ValueError):
            pass

    # ----------------------------------------------------------------- errors
    def _primary(self) -> RankFailure:
        return sorted(self.record.failures, key=lambda f: (f.secondary, f.time))[0]

    def _worker_error(self) -> WorkerError:
        primary = self._primary()
        others = [f for f in self.record.failures if f is not primary]
        return WorkerError(primary, others, self.logs)

    def _emit(self, event: Any) -> None:
        for observer in self.observers:
            try:
                observer(event)
            except Exception as exc:  # an observer must never break the run
                self.observers.remove(observer)
                import warnings

                warnings.warn(f"Observer {observer!r} raised {exc!r} and was detached.", stacklevel=2)


def _signal(process: Any, signum: int) -> None:
    try:
        if process.pid is not None:
            os.kill(process.pid, signum)
    except (ProcessLookupError, OSError, ValueError):
        pass
