"""What submitit runs on each node of a SLURM launch (one task per node): that node's ranks with
the local launcher, the rendezvous on the allocation's first node.

Live output goes to the task's own stdout/stderr — the job's log files, which the notebook
follows — as `[rankN] line`; every other event of the ranks (launch/events.py's WORKER_EVENTS:
metrics, progress, displays, bars, memory, checkpoints, ...) and notes go to
`<job>_<node>_events.jsonl` next to them. The return value (a NodeOutcome) comes back through submitit's result file.

Preemption and time limits: SLURM signals the job (submitit's signal, USR2 by default, and SIGTERM
first on preemption). The workers get the preemption request (slurm_preemption.py): a loop that
checks `accelerator.preempted` saves and returns at the end of its step on every rank. Then
submitit calls `checkpoint()` here on the first task, which requeues the same launch; the function
starts again and resumes from its latest checkpoint (its own `load_state()`). A function that
never checks is stopped after a grace period and requeued the same way.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from ..launch.events import OutputLine, RunStarted
from ..system.schedulers import derived_port
from .logs import EVENT_KIND, encode_event
from .node import NodeJob, NodeOutcome, NodeRun
from .slurm_owner import OwnerWatch, owner_path
from .slurm_preemption import SlurmPreemption, requeue_signal


def events_path(folder: str | os.PathLike[str], job_id: str, node: int) -> Path:
    return Path(folder) / f"{job_id}_{node}_events.jsonl"


class SlurmNodeTask:
    """The callable submitit pickles and runs once per node (and again after a requeue)."""

    def __init__(self, job: NodeJob) -> None:
        self.job = job
        self._node: NodeRun | None = None
        self._events: Any = None
        self._preemption: SlurmPreemption | None = None
        self._stopped: dict[str, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"job": self.job}  # a requeue pickles the task: never the running launcher

    def __setstate__(self, state: dict[str, Any]) -> None:
        type(self).__init__(self, state["job"])

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
        blocked = {signal.SIGTERM, requeue_signal()}
        try:
            owner = OwnerWatch(owner_path(env.paths.folder, env.job_id), self._owner_gone)
            with owner, SlurmPreemption(self._request, self._stop) as self._preemption:
                signal.pthread_sigmask(signal.SIG_BLOCK, blocked)  # inherited by the workers forked below
                try:
                    self._node = NodeRun(job, emit=self._emit, say=lambda text: self._event("note", text))
                    outcome = self._node.run(observers=[_unblock_when_started(blocked)])
                finally:
                    signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)  # a pending signal arrives here
                if self._preemption.requested:
                    self._stopped = self._how_it_stopped(outcome)
                    self._preemption.requeue()  # node 0: submitit requeues and exits; others exit
                    outcome.status = "stopped"  # SIGTERM alone: SLURM ends the job, no requeue
                return outcome
        finally:
            self._events.close()

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """submitit's preemption / time-limit hook: requeue this launch (a fresh copy of the task)."""
        import submitit

        if self._events is not None and not self._events.closed:
            self._event("requeue", {"signal": "preemption or time limit", **self._stopped})
        return submitit.helpers.DelayedSubmission(SlurmNodeTask(self.job))

    def _request(self, signum: int) -> None:
        if self._node is not None:
            self._node.request_preemption(signum)

    def _stop(self) -> None:
        if self._node is not None:
            self._node.stop()

    def _owner_gone(self, reason: str) -> None:
        self._event("note", reason)
        print(f"notebook_launcher: {reason}", file=sys.stderr, flush=True)
        self._stop()

    def _how_it_stopped(self, outcome: NodeOutcome) -> dict[str, Any]:
        """For the notebook's line: the signals, whether every rank saved and returned, the checkpoint."""
        record = self._node.supervisor.record if self._node and self._node.supervisor else None
        graceful = bool(record and record.preempted) and outcome.status == "done"
        return {
            "signals": list(self._preemption.received if self._preemption else []),
            "graceful": graceful,
            "checkpoint": record.checkpoint if record else None,
        }

    def _emit(self, event: Any) -> None:
        """A rank's line goes to this task's log as `[rankN] text`; any other event of the ranks (the
        node relays only those) goes to the events file, read back by logs.py."""
        if isinstance(event, OutputLine):
            if event.live:
                return  # a "\r" line not yet ended: the log file gets it once it ends
            stream = sys.stdout if event.stream == "stdout" else sys.stderr
            stream.write(f"[rank{event.rank}] {event.text}\n")
            stream.flush()
        else:
            self._event(EVENT_KIND, encode_event(event))

    def _event(self, kind: str, payload: Any) -> None:
        try:
            self._events.write(
                json.dumps({"kind": kind, "payload": payload, "time": time.time()}, default=repr) + "\n"
            )
        except (OSError, ValueError, TypeError):  # TypeError: keys JSON cannot hold; never break the run
            pass


def _unblock_when_started(signals: set[signal.Signals]) -> Any:
    """Once the workers are forked (with the signals blocked), let this process receive them again."""

    def observer(event: Any) -> None:
        if isinstance(event, RunStarted):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, signals)

    return observer
