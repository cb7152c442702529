"""The notebook's side of a cluster launch, the same for every engine: start the nodes, relay
their events to the cell and the RunView, stop everything on Stop / Ctrl-C / a failure, and hand
back a LaunchResult or the WorkerError / LaunchTimeout / LaunchStopped a local launch would raise.

An engine (ray.py, slurm.py) provides a Backend: start(job), poll(), stop(), close().
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import cloudpickle

from ..launch.events import (
    MetricLogged,
    OutputLine,
    RunFinished,
    RunStarted,
    RunStatus,
    poll_hooks_ask_stop,
    tick,
)
from ..launch.result import LaunchResult, LaunchStopped, LaunchTimeout, RankFailure, WorkerError, metric_row
from .node import NodeJob, NodeOutcome

POLL_SECONDS = 0.2
STOP_GRACE_SECONDS = 30.0  # how long stopped nodes get to report before close() removes them


class Backend(Protocol):
    name: str

    def start(self, job: NodeJob, say: Callable[[str], None]) -> None: ...
    def poll(self) -> tuple[list[Any], list[str], dict[int, NodeOutcome]]: ...
    def stop(self) -> None: ...
    def close(self) -> None: ...


def crashed_outcome(node_rank: int, nproc: int, what: str, text: str) -> NodeOutcome:
    """A node that could not run its ranks at all (engine error, setup failure): its first rank
    carries the failure, with the engine's own text as traceback."""
    failure = RankFailure(
        rank=node_rank * nproc, exc_type="ClusterNodeError", message=what, traceback=text, time=time.time()
    )
    return NodeOutcome(node_rank, "failed", failures=[failure])


class ClusterRun:
    """One launch on a cluster, driven from the notebook."""

    def __init__(
        self,
        backend: Backend,
        job: NodeJob,
        config: Any,
        observers: Sequence[Callable[[Any], None]],
        poll_hooks: Sequence[Callable[[], Any]] = (),
        should_stop: Callable[[], bool] | None = None,
        say: Callable[[str], None] = print,
    ) -> None:
        self.backend, self.job, self.config = backend, job, config
        self.observers = list(observers)
        self.poll_hooks = list(poll_hooks)
        self.should_stop = should_stop or (lambda: False)
        self.say = say
        self.world_size = job.nproc * job.num_nodes
        self.lines: dict[int, list[str]] = {rank: [] for rank in range(self.world_size)}
        self.metrics: list[dict[str, Any]] = []
        self.outcomes: dict[int, NodeOutcome] = {}

    def run(self, should_stop: Callable[[], bool] | None = None) -> LaunchResult:
        """Run to the end; `should_stop` (a RunHandle's Stop) adds to the one given at creation."""
        if should_stop is not None:
            first = self.should_stop
            self.should_stop = lambda: first() or should_stop()
        started = time.monotonic()
        status: RunStatus
        status, error, failed_rank, extra = "failed", None, None, {}
        try:
            self.backend.start(self.job, self.say)
            ranks = tuple(range(self.world_size))
            self._emit(RunStarted(self.world_size, ranks, self.backend.name, self.config))
            reason = self._loop()
            result = self._result(reason, started)
            status = "done"
            return result
        except KeyboardInterrupt:
            status, error = "stopped", "interrupted (KeyboardInterrupt)"
            self.backend.stop()
            raise
        except LaunchStopped as exc:
            status, error = "stopped", str(exc)
            raise
        except LaunchTimeout as exc:
            status, error = "timeout", str(exc).splitlines()[0]
            raise
        except WorkerError as exc:
            error, failed_rank = exc.failure.summary(), exc.rank
            extra = exc.failure.finish_extra()
            raise
        finally:
            self.backend.close()
            self._emit(RunFinished(status, time.monotonic() - started, failed_rank, error, extra))

    def _loop(self) -> str | None:
        """Poll until every node reported; returns why the run was stopped early, if it was."""
        reason, stopped_at = None, 0.0
        while len(self.outcomes) < self.job.num_nodes:
            events, notes, finished = self.backend.poll()
            for note in notes:
                self.say(note)
            for event in events:
                self._record(event)
            tick(self.observers)
            self.outcomes.update(finished)
            if reason is None:
                if any(outcome.status != "done" for outcome in finished.values()):
                    reason = "failure"
                elif self.should_stop() or poll_hooks_ask_stop(self.poll_hooks):
                    reason = "stopped"
                if reason is not None:
                    self.backend.stop()
                    stopped_at = time.monotonic()
            elif time.monotonic() - stopped_at > STOP_GRACE_SECONDS:
                break  # close() removes what did not answer
            if len(self.outcomes) < self.job.num_nodes:
                time.sleep(POLL_SECONDS)
        return reason

    def _record(self, event: Any) -> None:
        if isinstance(event, OutputLine) and not event.live:  # a live "\r" line is shown, not kept
            self.lines.setdefault(event.rank, []).append(event.text)
        elif isinstance(event, MetricLogged):
            self.metrics.append(metric_row(event.rank, event.step, event.time, event.values))
        self._emit(event)

    def _result(self, reason: str | None, started: float) -> LaunchResult:
        outcomes = self.outcomes.values()
        failures = [failure for outcome in outcomes for failure in outcome.failures]
        logs = self._logs()
        if reason == "stopped" and not [f for f in failures if not f.secondary]:
            raise LaunchStopped(
                "The launch was stopped on request; every rank on the cluster has been stopped."
            )
        timed_out = [outcome for outcome in outcomes if outcome.status == "timeout"]
        if timed_out:
            running = sorted(rank for outcome in timed_out for rank in outcome.timeout_ranks)
            stacks = {rank: text for outcome in timed_out for rank, text in outcome.stacks.items()}
            raise LaunchTimeout(self.job.timeout or 0.0, running, stacks)
        values = {rank: blob for outcome in outcomes for rank, blob in outcome.values.items()}
        missing = [rank for rank in range(self.world_size) if rank not in values]
        if missing and not failures:
            nodes = sorted({rank // self.job.nproc for rank in missing})
            text = f"nodes {nodes} did not report within {STOP_GRACE_SECONDS:.0f} s of the stop"
            failures = [
                RankFailure(rank=missing[0], exc_type="ClusterNodeError", message=text, time=time.time())
            ]
        if failures:
            primary = sorted(failures, key=lambda f: (f.secondary, f.time))[0]
            raise WorkerError(primary, [f for f in failures if f is not primary], logs)
        result = LaunchResult(
            [cloudpickle.loads(values[rank]) for rank in range(self.world_size)],
            ranks=list(range(self.world_size)),
            logs=logs,
            metrics=self.metrics,
            duration=time.monotonic() - started,
            start_method=self.backend.name,
            world_size=self.world_size,
        )
        # the node of rank 0 (which publishes every save) records them, as a local launch does
        nodes = sorted(self.outcomes)
        result.checkpoints = [entry for node in nodes for entry in self.outcomes[node].checkpoints]
        return result

    def _logs(self) -> dict[int, str]:
        """Each rank's output: the node's own record when it reported, else the lines streamed."""
        logs = {rank: "".join(line + "\n" for line in lines) for rank, lines in self.lines.items()}
        for outcome in self.outcomes.values():
            logs.update(outcome.logs)
        return logs

    def _emit(self, event: Any) -> None:
        for observer in list(self.observers):
            try:
                observer(event)
            except Exception as exc:  # an observer must never break the run
                self.observers.remove(observer)
                import warnings

                warnings.warn(f"Observer {observer!r} raised {exc!r} and was detached.", stacklevel=2)
