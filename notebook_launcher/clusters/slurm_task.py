"""What submitit runs on each node of a SLURM launch (one task per node): that node's ranks with
the local launcher, the rendezvous on the allocation's first node.

Live output goes to the task's own stdout/stderr — the job's log files, which the notebook
follows — as `[rankN] line`; metrics, progress and notes go to `<job>_<node>_events.jsonl` next to
them. The return value (a NodeOutcome) comes back through submitit's result file.

Preemption and time limits: SLURM signals the job (submitit's signal, USR2 by default, and SIGTERM
first on preemption). submitit calls `checkpoint()` here on the first task, which requeues the same
launch; the function then starts again and resumes from its latest checkpoint (its own
`load_state()`). The workers never act on those signals themselves (they are blocked while the
workers start), so they do not die half-way through a step before the requeue; the launcher
stops them.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from ..launch.events import MetricLogged, OutputLine, ProgressUpdate, RunStarted
from ..schedulers import derived_port
from .node import NodeJob, NodeOutcome, NodeRun


def events_path(folder: str | os.PathLike[str], job_id: str, node: int) -> Path:
    return Path(folder) / f"{job_id}_{node}_events.jsonl"


class SlurmNodeTask:
    """The callable submitit pickles and runs once per node (and again after a requeue)."""

    def __init__(self, job: NodeJob) -> None:
        self.job = job
        self._node: NodeRun | None = None
        self._events: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {"job": self.job}  # a requeue pickles the task: never the running launcher

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["job"])

    def __call__(self) -> NodeOutcome:
        import submitit

        env = submitit.JobEnvironment()
        restarts = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
        hosts = env.hostnames
        job = NodeJob(
            self.job.payload,
            self.job.config,
            self.job.nproc,
            env.node,
            self.job.num_nodes,
            hosts[0],
            derived_port(f"notebook_launcher:{env.job_id}:{restarts}"),
            self.job.timeout,
        )
        self._events = open(events_path(env.paths.folder, env.job_id, env.node), "a", buffering=1)
        self._event("start", {"host": hosts[env.node] if env.node < len(hosts) else "", "restarts": restarts})
        preemption = _preemption_signals()
        signal.pthread_sigmask(signal.SIG_BLOCK, preemption)  # inherited by the workers forked below
        try:
            self._node = NodeRun(job, emit=self._emit, say=lambda text: self._event("note", text))
            return self._node.run(observers=[_unblock_when_started(preemption)])
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, preemption)
            self._events.close()

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """submitit's preemption / time-limit hook: requeue this launch (a fresh copy of the task)."""
        import submitit

        if self._events is not None and not self._events.closed:
            self._event("requeue", {"signal": "preemption or time limit"})
        return submitit.helpers.DelayedSubmission(SlurmNodeTask(self.job))

    def _emit(self, event: Any) -> None:
        if isinstance(event, OutputLine):
            stream = sys.stdout if event.stream == "stdout" else sys.stderr
            stream.write(f"[rank{event.rank}] {event.text}\n")
            stream.flush()
        elif isinstance(event, MetricLogged):
            self._event(
                "metric", {"rank": event.rank, "step": event.step, "values": event.values, "time": event.time}
            )
        elif isinstance(event, ProgressUpdate):
            fields = ("rank", "step", "total", "time", "epoch")
            self._event("progress", {name: getattr(event, name) for name in fields})

    def _event(self, kind: str, payload: Any) -> None:
        try:
            self._events.write(
                json.dumps({"kind": kind, "payload": payload, "time": time.time()}, default=repr) + "\n"
            )
        except (OSError, ValueError):
            pass


def _preemption_signals() -> set[signal.Signals]:
    """SIGTERM and submitit's preemption signal (SUBMITIT_PREEMPT_SIGNAL, USR2 by default)."""
    name = "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")
    return {signal.SIGTERM, getattr(signal, name, signal.SIGUSR2)}


def _unblock_when_started(signals: set[signal.Signals]) -> Any:
    """Once the workers are forked (with the signals blocked), let this process receive them again."""

    def observer(event: Any) -> None:
        if isinstance(event, RunStarted):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, signals)

    return observer
