"""RunHandle: a launch running in a background thread, so a widget's Stop button can still be clicked
while it runs (start_launch returns one)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..estimate.performance import PerformanceReport
from .faults.restarts import RestartingRun
from .planning import LaunchPlan
from .result import LaunchResult
from .supervise.hang_report import HangReport
from .supervise.supervisor import Watch


def collect_result(run: RestartingRun) -> LaunchResult:
    """The LaunchResult of a finished run (its last attempt): every local rank's value, logs and metrics."""
    supervisor, plan = run.supervisor, run.plan
    ranks = [spec.rank for spec in plan.specs]
    result = LaunchResult(
        [supervisor.record.values.get(rank) for rank in ranks],
        ranks=ranks,
        logs=supervisor.logs,
        metrics=supervisor.record.metrics,
        duration=time.monotonic() - supervisor.started,
        start_method=plan.start_method,
        world_size=plan.world_size,
        memory=supervisor.record.memory,
    )
    result.performance = PerformanceReport.from_payloads(supervisor.record.performance)
    result.restarts, result.failures = run.restarts, list(run.failures)
    result.checkpoints = list(supervisor.record.checkpoints)
    result.duration = time.monotonic() - run.started
    return result


class RunHandle:
    """A launch running in a background thread: wait(), stop(), done, result.

    `runner(should_stop) -> LaunchResult` runs something else than local workers (a cluster launch).
    """

    def __init__(
        self,
        plan: LaunchPlan | None,
        observers: Sequence[Callable[[Any], None]],
        poll_hooks: Sequence[Callable[[], Any]],
        runner: Callable[[Callable[[], bool]], LaunchResult] | None = None,
        restart_on: str = "infrastructure",
    ):
        self._stop = threading.Event()
        self._runner = runner
        if runner is None:
            assert plan is not None
            self._attempts = RestartingRun(plan, Watch(observers, poll_hooks, self._stop.is_set), restart_on)
        self._plan = plan
        self._error: BaseException | None = None
        self.result: LaunchResult | None = None
        self._thread = threading.Thread(target=self._run, name="notebook_launcher-supervisor", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            if self._runner is not None:
                self.result = self._runner(self._stop.is_set)
                return
            self._attempts.run()
            self.result = collect_result(self._attempts)
        except BaseException as exc:  # noqa: BLE001 - handed to wait()
            self._error = exc

    def stacks(self, timeout: float = 10.0) -> HangReport:
        """Where every rank is now: each rank's stack, the collective it is in and a verdict (a
        HangReport; print it). The run goes on. Raises RuntimeError once the run has ended."""
        if self._runner is not None:
            raise RuntimeError("stacks() is available for launches on this machine, not on a cluster.")
        if self.done:
            raise RuntimeError(
                "The launch has ended; nothing is running. Its logs are in the result or error."
            )
        return self._attempts.supervisor.hangs.ask_and_wait(timeout)

    @property
    def performance(self) -> PerformanceReport:
        """Each rank's step breakdown so far and the straggler verdict, while the run goes on."""
        if self.result is not None:
            return self.result.performance
        if self._runner is not None:
            return PerformanceReport()
        return PerformanceReport.from_payloads(dict(self._attempts.supervisor.record.performance))

    def stop(self) -> None:
        """Stop every worker now (like an interrupt); wait() then raises LaunchStopped."""
        self._stop.set()

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def wait(self, timeout: float | None = None) -> LaunchResult:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"The launch is still running after {timeout}s.")
        if self._error is not None:
            raise self._error
        assert self.result is not None
        return self.result
