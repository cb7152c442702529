"""Runs that survive: start the ranks again after an infrastructure fault or a preemption, up to
max_restarts times, each time with a fresh rendezvous (a new TCPStore) and the attempt number in
TORCHELASTIC_RESTART_COUNT (accelerator.restart_count), as torchrun's agent does.

The training function resumes itself with the ordinary Accelerate pattern (load_state() of the
latest automatic checkpoint); the launcher only decides whether to start again and says why.
A Python exception raised by the user's code is deterministic, so by default (restart_on=
"infrastructure") it is not retried: the WorkerError then says so.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from typing import Any

from ...errors import ConfigError
from .. import planning
from ..events import ProgressUpdate, RunRestarting
from ..planning import LaunchPlan
from ..result import LaunchPreempted, RankFailure, RendezvousStalled, RunRecord, WorkerError
from ..supervise.rendezvous_watch import RETRIES as RENDEZVOUS_RETRIES
from ..supervise.supervisor import Supervisor, Watch
from .launcher_signals import LauncherSignals

RESTART_ON = ("infrastructure", "any")
_TIMEOUT_WORDS = ("timed out", "timeout")
_COLLECTIVE_WORDS = ("gloo", "nccl", "collective", "watchdog", "process group", "processgroup")


def check_restart_on(restart_on: str) -> str:
    if restart_on not in RESTART_ON:
        raise ConfigError(
            f"restart_on={restart_on!r} is not valid; use 'infrastructure' (restart after a rank was killed, "
            "lost its peers or timed out in a collective) or 'any' (also after a Python exception)."
        )
    return restart_on


def infrastructure_fault(failure: RankFailure) -> str | None:
    """What happened to the rank, when it is the machine's doing rather than the code's; None for a
    Python exception raised by the user's code."""
    if failure.exc_type is None:
        if failure.description:  # the launcher's own finding (rendezvous_watch.py)
            return "could not join the process group (a peer had already returned)"
        if failure.signal_name:
            return f"was killed ({failure.signal_name})"
        return f"exited with code {failure.exitcode} without a Python exception"
    if failure.secondary:
        return f"lost its peers ({failure.exc_type})"
    text = f"{failure.exc_type} {failure.message or ''}".lower()
    if any(w in text for w in _TIMEOUT_WORDS) and any(w in text for w in _COLLECTIVE_WORDS):
        return f"timed out in a collective ({failure.exc_type})"
    return None


def fresh_plan(plan: LaunchPlan, attempt: int) -> LaunchPlan:
    """The same launch with a new rendezvous store (the old one went with the failed attempt) and
    the attempt number for the workers."""
    addr, port, store = planning.rendezvous(plan.request, on_demand=True)
    specs = [
        dataclasses.replace(
            spec,
            env={
                **spec.env,
                "MASTER_ADDR": addr,
                "MASTER_PORT": str(port),
                "TORCHELASTIC_RESTART_COUNT": str(attempt),
            },
        )
        for spec in plan.specs
    ]
    return dataclasses.replace(plan, specs=specs, store=store)


class RestartingRun:
    """Supervises attempts until one ends without a restartable failure; `supervisor` is the last."""

    def __init__(self, plan: LaunchPlan, watch: Watch, restart_on: str = "infrastructure") -> None:
        self.plan = plan
        self.observers = [*watch.observers, self._watch_progress]
        self.watch = dataclasses.replace(watch, observers=self.observers)  # each attempt's Supervisor
        self.restart_on = check_restart_on(restart_on)
        self.max_restarts = int(plan.config.max_restarts or 0)
        self.restarts = 0
        self.starts_again = 0  # after a rendezvous that never formed (not counted in restarts)
        self.failures: list[Exception] = []
        self.checkpoint: str | None = None
        self._steps: dict[int, str] = {}
        self.supervisor = self._new_supervisor()
        self.started = time.monotonic()

    def _new_supervisor(self) -> Supervisor:
        return Supervisor(self.plan, self.watch.observers, self.watch.poll_hooks, self.watch.should_stop)

    def stacks(self) -> dict[int, str]:
        return self.supervisor.stacks()

    def run(self) -> RunRecord:
        __tracebackhide__ = True  # IPython: the launcher's frames say nothing about the user's error
        with LauncherSignals(self._forward) as signals:
            while True:
                try:
                    record = self.supervisor.run()
                except WorkerError as error:
                    self._remember(self.supervisor.record)
                    if signals.received:
                        raise self._preempted(signals.received, "the launcher") from error
                    reason = self._why_not(error.failure)
                    if reason:
                        if self.max_restarts:
                            error.explain_no_restart(f"notebook_launch did not restart: {reason}.")
                        raise
                    self._restart(error, f"rank {error.rank} {self._what(error.failure)}")
                    continue
                except RendezvousStalled as stall:
                    self._start_again(stall)
                    continue
                self._remember(record)
                if not (record.preempted or signals.received):
                    return record
                asked = [rank for rank, name in sorted(record.preempted.items()) if name]
                where = (
                    "the launcher" if signals.received else f"rank {(asked or sorted(record.preempted))[0]}"
                )
                preempted = self._preempted(signals.received or self._signal(record), where, record.values)
                if signals.received or self.restarts >= self.max_restarts:
                    raise preempted
                self._restart(preempted, f"{where} was preempted")

    # ------------------------------------------------------------------ pieces
    def _why_not(self, failure: RankFailure) -> str | None:
        """None when this failure is restarted; else why not."""
        fault = infrastructure_fault(failure)
        if fault is None and self.restart_on == "infrastructure":
            return (
                f"rank {failure.rank} raised {failure.exc_type} in your code, which would fail the same way "
                "again (restart_on='infrastructure'; pass restart_on='any' to retry it anyway)"
            )
        if self.restarts >= self.max_restarts:
            return f"all {self.max_restarts} restart(s) (max_restarts={self.max_restarts}) were used"
        return None

    def _what(self, failure: RankFailure) -> str:
        what = infrastructure_fault(failure) or f"raised {failure.exc_type}: {failure.message}"
        step = self._steps.get(failure.rank)
        return f"{what} at {step}" if step else what

    def _restart(self, cause: Exception, reason: str) -> None:
        self.failures.append(cause)
        self.restarts += 1
        self._announce(RunRestarting(self.restarts, self.max_restarts, reason, self.checkpoint))
        self._steps.clear()
        self.plan = fresh_plan(self.plan, self.restarts)
        self.supervisor = self._new_supervisor()

    def _start_again(self, stall: RendezvousStalled) -> None:
        """The process group never formed: nothing of the user's training ran, so start the same
        attempt once more with a fresh store (rendezvous_watch.py); raise when that stalls too.
        Never silent: said in the cell, warned (also under quiet=True), and in result.failures with
        where each rank waited."""
        self.starts_again += 1
        self.failures.append(stall)
        if self.starts_again > RENDEZVOUS_RETRIES:
            raise RendezvousStalled(
                stall.seconds, stall.stacks, stall.report, attempts=self.starts_again
            ) from None
        reason = (
            f"every rank waited in the rendezvous (init_process_group) for more than {stall.seconds:g}s on this "
            "one machine and the process group did not form; the ranks were stopped and start once more"
        )
        self._announce(
            RunRestarting(self.restarts, self.max_restarts, reason, self.checkpoint, start_again=True)
        )
        warnings.warn(
            f"notebook_launch: {reason} (result.failures holds where each rank waited).",
            RuntimeWarning,
            stacklevel=2,
        )
        self.plan = fresh_plan(self.plan, self.restarts)
        self.supervisor = self._new_supervisor()

    def _announce(self, event: RunRestarting) -> None:
        for observer in tuple(self.observers):
            try:
                observer(event)
            except Exception:  # an observer must never break the run (the supervisor detaches it)
                pass

    def _remember(self, record: RunRecord) -> None:
        self.checkpoint = record.checkpoint or self.checkpoint

    def _preempted(
        self, signal: str | None, where: str, values: dict[int, Any] | None = None
    ) -> LaunchPreempted:
        error = LaunchPreempted(self.checkpoint, dict(values or {}), signal, where)
        error.restarts, error.failures = self.restarts, list(self.failures)
        return error

    @staticmethod
    def _signal(record: RunRecord) -> str | None:
        return next((name for name in record.preempted.values() if name), None)

    def _forward(self, signum: int) -> None:
        """A preemption signal reached the launcher: pass it to every running rank."""
        from ..supervise.processes import signal_process

        for worker in self.supervisor.workers:
            if worker.alive and worker.started:
                signal_process(worker, signum)

    def _watch_progress(self, event: Any) -> None:
        if isinstance(event, ProgressUpdate):
            epoch = f"epoch {event.epoch} " if event.epoch is not None else ""
            self._steps[event.rank] = f"{epoch}step {event.step}"
