"""SLURM: `notebook_launch(fn, cluster=SlurmCluster(...))` (or `cluster="slurm"`), submitted with
submitit — one task per node, each starting that node's ranks (slurm_task.py); live output
followed from the job's log files; results and tracebacks back through submitit's result files;
Stop / Ctrl-C / a failure -> `scancel`, and the launch waits until SLURM says the job is over.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, install_hint
from .driver import crashed_outcome
from .logs import LogFollower
from .node import NodeJob, NodeOutcome
from .slurm_owner import OwnerBeat, owner_path
from .slurm_task import SlurmNodeTask, events_path

FINISHED_STATES = (
    "COMPLETED",
    "CANCELLED",
    "FAILED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
    "PREEMPTED",
)
STATE_POLL_SECONDS = 2.0
CANCEL_WAIT_SECONDS = 60.0


@dataclass
class SlurmCluster:
    """Where: SLURM nodes. `time` in minutes; `setup` shell lines run before the task (e.g.
    `source ~/venv/bin/activate`); `folder` keeps each job's logs and results (`<folder>/<job id>/`)."""

    nodes: int = 1
    gpus_per_node: int = 0
    partition: str | None = None
    time: int = 60
    account: str | None = None
    folder: str = "notebook_launcher_jobs"
    setup: list[str] = field(default_factory=list)
    cpus_per_task: int | None = None
    job_name: str = "notebook_launcher"
    max_requeues: int = 3
    additional_parameters: dict[str, Any] = field(default_factory=dict)
    name: str = field(default="slurm", init=False)

    def __post_init__(self) -> None:
        for key in ("nodes", "time"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"SlurmCluster({key}={value!r}) must be a positive whole number.")
        if isinstance(self.setup, str):
            self.setup = [self.setup]

    @property
    def num_nodes(self) -> int:
        return self.nodes

    def default_processes(self) -> int:
        return self.gpus_per_node or 1

    def backend(self) -> SlurmBackend:
        return SlurmBackend(self)


class SlurmBackend:
    """One submitted job: submit, follow its files, cancel, and wait until SLURM is done with it."""

    name = "slurm"

    def __init__(self, cluster: SlurmCluster) -> None:
        self.cluster = cluster
        self.job: Any = None
        self.nproc = 1
        self.num_nodes = 1
        self.cancelled = False
        self.followers: list[LogFollower] = []
        self.say: Callable[[str], None] = print
        self.finished: dict[int, NodeOutcome] = {}
        self.last_state_check = 0.0
        self.owner: OwnerBeat | None = None

    def start(self, job: NodeJob, say: Callable[[str], None]) -> None:
        submitit = _import_submitit()
        self.nproc, self.num_nodes, self.say = job.nproc, job.num_nodes, say
        executor = submitit.SlurmExecutor(
            folder=str(Path(self.cluster.folder).expanduser() / "%j"),
            max_num_timeout=self.cluster.max_requeues,
        )
        parameters: dict[str, Any] = dict(
            nodes=job.num_nodes,
            ntasks_per_node=1,
            cpus_per_task=self.cluster.cpus_per_task or job.nproc,
            time=self.cluster.time,
            job_name=self.cluster.job_name,
            setup=list(self.cluster.setup),
            additional_parameters=dict(self.cluster.additional_parameters),
        )
        optional = dict(partition=self.cluster.partition, account=self.cluster.account)
        parameters.update({key: value for key, value in optional.items() if value})
        if self.cluster.gpus_per_node:
            parameters["gpus_per_node"] = self.cluster.gpus_per_node
        executor.update_parameters(**parameters)
        try:
            self.job = executor.submit(SlurmNodeTask(job))
        except Exception as exc:  # sbatch refused (no such partition, account, too many nodes, ...)
            raise ConfigError(f"SLURM did not accept the job: {exc}") from None
        folder = Path(self.job.paths.folder)
        self.owner = OwnerBeat(
            owner_path(folder, self.job.job_id)
        )  # the job ends if we stop (slurm_owner.py)
        self.owner.beat()
        for node in range(job.num_nodes):
            out, err = (folder / f"{self.job.job_id}_{node}_log.{ext}" for ext in ("out", "err"))
            self.followers.append(LogFollower(node, out, err, events_path(folder, self.job.job_id, node)))
        say(
            f"notebook_launch: SLURM job {self.job.job_id} submitted: {job.num_nodes} node(s) x {job.nproc} rank(s); "
            f"logs in {folder}."
        )

    def poll(self) -> tuple[list[Any], list[str], dict[int, NodeOutcome]]:
        if self.owner is not None:
            self.owner.beat()
        events: list[Any] = []
        notes: list[str] = []
        for follower in self.followers:
            node_events, node_notes = follower.read()
            events += node_events
            notes += [
                f"notebook_launch: SLURM job {self.job.job_id}, node {follower.node}: {n}" for n in node_notes
            ]
        newly = self._collect()
        return events, notes, newly

    def _collect(self) -> dict[int, NodeOutcome]:
        newly: dict[int, NodeOutcome] = {}
        for node in range(self.num_nodes):
            if node in self.finished:
                continue
            task = self.job.task(node) if self.num_nodes > 1 else self.job
            if task.paths.result_pickle.exists():
                newly[node] = self._result(node, task)
        if (
            len(self.finished) + len(newly) < self.num_nodes
            and time.monotonic() - self.last_state_check > STATE_POLL_SECONDS
        ):
            self.last_state_check = time.monotonic()
            state = job_state(self.job.job_id)
            if state is None or state.split()[0] in FINISHED_STATES:
                time.sleep(1.0)  # result files are written just before the task ends
                for node in range(self.num_nodes):
                    if node not in self.finished and node not in newly:
                        newly[node] = self._ended_without_result(node, state or "gone")
        self.finished.update(newly)
        return newly

    def _result(self, node: int, task: Any) -> NodeOutcome:
        try:
            return task.result()
        except Exception as exc:  # our task raised (or submitit could not run it): its traceback
            return crashed_outcome(
                node, self.nproc, f"the node's task failed in SLURM job {self.job.job_id}", str(exc)
            )

    def _ended_without_result(self, node: int, state: str) -> NodeOutcome:
        if self.cancelled:
            return NodeOutcome(node, "stopped")
        tail = self.followers[node].tail()
        return crashed_outcome(
            node,
            self.nproc,
            f"SLURM job {self.job.job_id} ended ({state}) before node {node} reported",
            f"SLURM job {self.job.job_id} ended with state {state}; last lines of node {node}'s logs:\n{tail}",
        )

    def stop(self) -> None:
        if self.job is not None and not self.cancelled:
            self.cancelled = True
            self.job.cancel(check=False)

    def close(self) -> None:
        """Nothing of this job left on the cluster: cancel it unless it ended, and wait until it has."""
        if self.job is None:
            return
        state = job_state(self.job.job_id)
        if state is not None and state.split()[0] not in FINISHED_STATES:
            self.stop()
            deadline = time.monotonic() + CANCEL_WAIT_SECONDS
            while time.monotonic() < deadline:
                state = job_state(self.job.job_id)
                if state is None or state.split()[0] in FINISHED_STATES:
                    break
                time.sleep(0.5)
            else:
                self.say(
                    f"notebook_launch: SLURM job {self.job.job_id} is still {state} {CANCEL_WAIT_SECONDS:.0f} s after scancel."
                )


def job_state(job_id: str) -> str | None:
    """SLURM's state of the job ("RUNNING", "PENDING", "COMPLETED", ...), None once SLURM forgot it."""
    try:
        done = subprocess.run(
            ["squeue", "-h", "-j", str(job_id), "-t", "all", "-o", "%T"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "UNKNOWN"
    lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    if done.returncode != 0:
        return None if "Invalid job id" in done.stderr else "UNKNOWN"
    return lines[0] if lines else None


def _import_submitit() -> Any:
    try:
        import submitit
    except ImportError:
        raise ConfigError(
            f"cluster='slurm' submits with submitit: {install_hint('submitit', 'slurm')}."
        ) from None
    return submitit


def read_events(path: Path) -> list[dict[str, Any]]:
    """Every event a node wrote so far (for tests and post-mortems)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
