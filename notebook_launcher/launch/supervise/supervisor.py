"""Start the workers, watch them, and always leave nothing behind.

One loop in the calling thread waits (select) on every worker's output pipes, message pipe and
process sentinel at once, so output streams live, a failure is seen within milliseconds even when
the other ranks sit in a collective, and Ctrl-C / the notebook's stop button lands here. What the
workers send is read by the Inbox (inbox.py); the processes themselves are handled in processes.py.
"""

from __future__ import annotations

import selectors
import signal
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..events import HangReported, OutputLine, RunFinished, RunStarted, RunStatus, poll_hooks_ask_stop, tick
from ..planning import LaunchPlan
from ..result import (
    STARTUP_HINT,
    LaunchInterrupted,
    LaunchStopped,
    LaunchTimeout,
    RankFailure,
    RendezvousStalled,
    RunRecord,
    WorkerError,
)
from ..worker.entry import STACK_DUMP_SIGNAL
from ..worker.standby import LaunchState
from .forksafety import HelperProcesses, release_openmp_threads
from .hang_report import HangReport
from .inbox import Inbox, output_tail
from .processes import (
    STOP_SIGNALS,
    Worker,
    kill_and_reap,
    signal_group,
    signal_process,
    start_worker,
    stop_group,
    wait_for_exit,
)
from .rendezvous_watch import RendezvousWatch
from .stacks import QUIET_SECONDS, StackDump
from .stall import HangWatch, is_dump_line
from .store_on_demand import StoreOnDemand

GRACE_SECONDS = 3.0
POLL_SECONDS = 0.05

Outcome = Literal["done", "stopped", "timeout", "rendezvous"]  # why the supervising loop ended
Source = Literal["stdout", "stderr", "msg", "store", "exit"]  # what a ready descriptor of the loop is


@dataclass(frozen=True)
class Watch:
    """Who hears a run and who may stop it: observers get every event, poll hooks run each turn
    while the kernel waits (one returning True stops the run), should_stop is asked each turn."""

    observers: Sequence[Callable[[Any], None]] = ()
    poll_hooks: Sequence[Callable[[], Any]] = ()
    should_stop: Callable[[], bool] | None = None


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
        self.workers: list[Worker] = []
        self.selector = selectors.DefaultSelector()
        self.stopping_since: float | None = None
        self.stopped_by_us: set[int] = set()
        self.killed_by_us: set[int] = set()  # still running GRACE_SECONDS after the stop: SIGKILLed
        self.started = 0.0
        self.helpers: HelperProcesses | None = None
        self.dump: StackDump | None = None
        self._running_at_stop: list[int] = []
        self.hangs = HangWatch(getattr(plan.config, "stall_timeout", None))
        self.observers.insert(0, self.hangs)
        self.timeout_report: HangReport | None = None
        self.rendezvous = RendezvousWatch(all_ranks_local=plan.world_size == len(plan.specs))
        self.inbox = Inbox(self.record, self._emit, self._begin_stop, self.stopped_by_us.__contains__)

    # ------------------------------------------------------------------ public
    def run(self) -> RunRecord:
        """Run to completion; raise WorkerError / LaunchTimeout / LaunchStopped / LaunchInterrupted."""
        __tracebackhide__ = True  # IPython: the launcher's frames say nothing about the user's error
        self.started = time.monotonic()
        status: RunStatus = "failed"
        error, finished = None, False
        if self.plan.pool is not None:
            self.plan.pool.launch_begins()
        try:
            try:
                self._start_all()
                self._emit(
                    RunStarted(
                        self.plan.world_size,
                        tuple(w.rank for w in self.workers),
                        self.plan.start_method,
                        self.plan.config,
                        ask_report=self.hangs.ask,
                    )
                )
                outcome = self._loop()
            except KeyboardInterrupt:
                status, error = "stopped", "interrupted (KeyboardInterrupt)"
                self._dump_stacks(interruptible=True)
                raise LaunchInterrupted(self.stacks()) from None
            status = "failed" if outcome == "rendezvous" else outcome
            if outcome == "timeout":
                assert self.plan.timeout is not None  # the loop times out only under a timeout
                raise LaunchTimeout(
                    self.plan.timeout, self._running_at_stop, self.stacks(), self.timeout_report
                )
            if outcome == "rendezvous":
                error = "the process group did not form (every rank in the rendezvous)"
                assert self.rendezvous.seconds is not None  # the loop gives up only after these seconds
                raise RendezvousStalled(self.rendezvous.seconds, self.stacks(), self.timeout_report)
            if outcome == "stopped":
                raise LaunchStopped(
                    "The launch was stopped on request; all workers have been terminated.", self.stacks()
                )
            if self.record.failures:
                status = "failed"
                failure = self._worker_error()
                error = failure.failure.summary()
                raise failure
            status, finished = "done", True
            return self.record
        finally:
            interrupted = self._shutdown()
            if self.plan.pool is not None:
                self.plan.pool.launch_ends(len(self.plan.specs))  # the next launch's workers, waiting
            primary = self._primary() if self.record.failures else None
            extra = primary.finish_extra() if primary else {}
            failed = primary.rank if primary else None
            self._emit(RunFinished(status, time.monotonic() - self.started, failed, error, extra))
            self.hangs.close()
            if interrupted and finished:  # Ctrl-C while a finished run was being cleaned up
                raise LaunchInterrupted()

    @property
    def logs(self) -> dict[int, str]:
        return {w.rank: "".join(line + "\n" for line in w.lines) for w in self.workers}

    def stacks(self) -> dict[int, str]:
        """What each running rank printed after the last stack-dump request."""
        return self.dump.texts() if self.dump else {}

    # ---------------------------------------------------------------- starting
    def _start_all(self) -> None:
        self.plan.preflight(self.should_stop)  # e.g. wait until the main machine's port answers
        if self.plan.start_method == "fork":
            release_openmp_threads()
        elif self.plan.pool is None:
            self.helpers = HelperProcesses()
        self.hangs.give_records(self.plan.specs)
        state = LaunchState() if self.plan.pool is not None else None
        for spec in self.plan.specs:
            if self.plan.pool is not None:  # a worker forked ahead, waiting (pool.py)
                worker = Worker(spec.rank, *self.plan.pool.start_worker(spec, state))
                self.workers.append(worker)
            else:
                worker = start_worker(self.plan.context, spec, self.plan.target, self.workers)
            self.selector.register(worker.out.fileno(), selectors.EVENT_READ, (worker, "stdout"))
            self.selector.register(worker.err.fileno(), selectors.EVENT_READ, (worker, "stderr"))
            self.selector.register(worker.msg.fileno(), selectors.EVENT_READ, (worker, "msg"))
            self.selector.register(worker.process.sentinel, selectors.EVENT_READ, (worker, "exit"))
        if isinstance(self.plan.store, StoreOnDemand):  # hosted at the first connection, after the forks
            self.selector.register(self.plan.store.fileno(), selectors.EVENT_READ, (None, "store"))

    # -------------------------------------------------------------------- loop
    def _loop(self) -> Outcome:
        deadline = None if self.plan.timeout is None else self.started + self.plan.timeout
        while not all(w.exited for w in self.workers):
            self._pump(POLL_SECONDS)
            if self.stopping_since is None:
                if deadline is not None and time.monotonic() > deadline:
                    return self._stop_with_stacks("timeout")
                if self.should_stop() or poll_hooks_ask_stop(self.poll_hooks):
                    return self._stop_with_stacks("stopped")
                if self.rendezvous.stalled(lambda: self.hangs.activities(self.workers)):
                    return self._stop_with_stacks("rendezvous")
                orphan = self.rendezvous.orphaned(lambda: self.hangs.activities(self.workers), self.workers)
                if orphan is not None:
                    self.record.failures.append(orphan)
                    self._begin_stop()
                self._report_hang_when_due()
            else:
                self._kill_after_grace()
        return "done"

    def _pump(self, timeout: float) -> None:
        """Wait up to `timeout` for anything from any worker and handle all of it (nothing stays ready,
        so the next wait really waits)."""
        for key, _ in self.selector.select(timeout):
            worker, what = key.data
            self._handle(worker, what, key.fd)
        tick(self.observers)

    def _stop_with_stacks(self, outcome: Literal["stopped", "timeout", "rendezvous"]) -> Outcome:
        self._dump_stacks()
        if outcome in ("timeout", "rendezvous"):
            self.timeout_report = self.hangs.report(outcome, self.workers, self.stacks())
            self._emit(HangReported(self.timeout_report))
        self._begin_stop()
        while not all(w.exited for w in self.workers):
            self._pump(POLL_SECONDS)
            self._kill_after_grace()
        return outcome

    def _dump_stacks(self, interruptible: bool = False) -> None:
        """Ask every running worker for its Python stack (faulthandler) and wait until the dumps are in,
        so a hang, a stop or an interrupt shows where each rank was."""
        running = [w for w in self.workers if w.alive and w.started]  # only these have the handler
        self.dump = StackDump(running)
        for worker in running:
            signal_process(worker, STACK_DUMP_SIGNAL)
        try:
            while not self.dump.complete():
                self._pump(QUIET_SECONDS / 2)
        except KeyboardInterrupt:
            if not interruptible:
                raise  # a second Ctrl-C while interrupting: stop waiting for the dumps

    def _report_hang_when_due(self) -> None:
        """A hang report, without stopping anything: asked for, or stall_timeout without progress."""
        reason = "asked" if self.hangs.asked() else "stall" if self.hangs.stalled(self.workers) else None
        if reason is None:
            return
        self.hangs.dumping = True  # the dumps are the report's, not progress nor output for the cell
        try:
            self._dump_stacks()
        finally:
            self.hangs.dumping = False
        self._emit(HangReported(self.hangs.report(reason, self.workers, self.stacks())))

    def _handle(self, worker: Worker, what: Source, fd: int) -> None:
        if what in ("stdout", "stderr"):
            if not self.inbox.read_output(worker, what):
                self._unregister(fd)
                (worker.out if what == "stdout" else worker.err).close()
        elif what == "msg":
            if not self.inbox.read_message(worker):
                self._unregister(fd)
                worker.msg.close()
                if self.plan.pool is not None and worker.reported:
                    self._hand_back(worker)
        elif what == "store":
            self._unregister(fd)
            self.plan.store.host()
        else:
            self._on_exit(worker, fd)

    def _hand_back(self, worker: Worker) -> None:
        """A warm-pool worker that reported and closed its message pipe has nothing left to say: read
        what it wrote before, and let the pool reap it while it exits (tearing down a process that
        has torch loaded takes tens of milliseconds; the launch need not wait for it)."""
        self.inbox.drain(worker)
        for conn in (worker.out, worker.err):
            if not conn.closed:
                self._unregister(conn.fileno())
        self._unregister(worker.process.sentinel)
        worker.exited = True
        failed = any(f.rank == worker.rank for f in self.record.failures)
        self.record.exitcodes[worker.rank] = 1 if failed else 0  # what the worker exits with
        worker.closed = True  # the pool's now: this launch's shutdown leaves it alone
        self.plan.pool.reap_later(worker)

    def _on_exit(self, worker: Worker, fd: int) -> None:
        self._unregister(fd)
        ended = wait_for_exit(worker, 5)  # not reaped before its group is signalled (processes.py)
        self.inbox.drain(worker)
        worker.exited = True
        signal_group(worker, signal.SIGKILL)  # what it started (DataLoader workers, subprocesses) ends too
        if ended:
            worker.process.join(0)  # reaped only now
        code = worker.process.exitcode
        self.record.exitcodes[worker.rank] = code
        known = next((f for f in self.record.failures if f.rank == worker.rank), None)
        if known is not None:
            known.exitcode = code
            return
        if (worker.rank in self.stopped_by_us and not self._died_before_stop(worker.rank, code)) or (
            code == 0 and worker.reported
        ):
            return
        tail = output_tail(list(worker.lines))
        if not worker.started and self.plan.start_method != "fork":
            tail = (tail + "\n" if tail else "") + STARTUP_HINT
        self.record.failures.append(
            RankFailure(rank=worker.rank, exitcode=code, time=time.monotonic(), output_tail=tail)
        )
        self._begin_stop()

    # ---------------------------------------------------------------- stopping
    def _begin_stop(self) -> None:
        if self.stopping_since is not None:
            return
        self.stopping_since = time.monotonic()
        self._running_at_stop = [w.rank for w in self.workers if not w.exited]
        for worker in self.workers:
            if worker.alive:
                self.stopped_by_us.add(worker.rank)
                stop_group(worker)

    def _died_before_stop(self, rank: int, code: int | None) -> bool:
        """A stopped rank killed by another signal than ours (the OOM killer's SIGKILL), or exited with
        an error code of its own: it was dying already, and its peers' errors about it reached the
        launcher first. It is the cause."""
        if code is None or code == 0 or rank in self.killed_by_us:
            return False
        return code > 0 or -code not in STOP_SIGNALS

    def _kill_after_grace(self) -> None:
        """SIGKILL the workers still running GRACE_SECONDS after the stop began (none before a stop)."""
        if self.stopping_since is None or time.monotonic() - self.stopping_since <= GRACE_SECONDS:
            return
        for worker in self.workers:
            if worker.alive:
                self.killed_by_us.add(worker.rank)
                signal_group(worker, signal.SIGKILL)

    def _shutdown(self) -> bool:
        """Whatever happened: no process left, every pipe closed, the selector closed.

        Returns whether Ctrl-C was pressed during it. Another Ctrl-C skips the grace period and
        restarts the (idempotent) final step, which always runs to its end.
        """
        interrupted = False
        try:
            self._begin_stop()
            deadline = time.monotonic() + GRACE_SECONDS
            for worker in self.workers:
                if worker.launched and not worker.closed:
                    wait_for_exit(worker, max(0.0, deadline - time.monotonic()))
        except KeyboardInterrupt:
            interrupted = True
        while True:
            try:
                self._end_everything()
                return interrupted
            except KeyboardInterrupt:
                interrupted = True

    def _end_everything(self) -> None:
        problems = []
        for worker in self.workers:
            try:
                kill_and_reap(worker)
            except Exception as exc:  # e.g. its warning turned into an error: the others still end
                problems.append(exc)
        self.selector.close()
        if isinstance(self.plan.store, StoreOnDemand):
            self.plan.store.close()
        self.plan.store = None  # closes the rendezvous port
        if self.helpers is not None:
            self.helpers.stop_new()
        if problems:
            raise problems[0]

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
        return WorkerError(primary, others, self.logs, self.record.values)

    def _emit(self, event: Any) -> None:
        if self.hangs.dumping and isinstance(event, OutputLine) and is_dump_line(event.text):
            observers = self.observers[:1]  # the report shows the dump: not in the cell's output too
        else:
            observers = self.observers
        for observer in tuple(observers):  # a copy: a failing observer is removed below
            try:
                observer(event)
            except Exception as exc:  # an observer must never break the run
                self.observers.remove(observer)
                warnings.warn(f"Observer {observer!r} raised {exc!r} and was detached.", stacklevel=2)
