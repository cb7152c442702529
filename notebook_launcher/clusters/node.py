"""What runs on each node of a cluster launch: that node's ranks, started by the ordinary local
launcher — the same worker code, env contract, output capture and failure handling as
`notebook_launch` — with every launch event handed to a callback that carries it to the notebook.

Shared by the engines: a Ray node agent runs it in a clean subprocess (node_main.py), a SLURM task
runs it in the task's own process (slurm_task.py).
"""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import cloudpickle

from ..config import LaunchConfig
from ..launch import planning
from ..launch.events import WORKER_EVENTS
from ..launch.planning import LaunchPlan
from ..launch.result import LaunchStopped, LaunchTimeout, RankFailure, WorkerError
from ..launch.supervise.supervisor import Supervisor
from ..resolution import resolve_launch


@dataclass
class NodeJob:
    """Everything one node needs to start its ranks; picklable, sent by the notebook."""

    payload: bytes  # cloudpickled (fn, args, kwargs)
    config: dict[str, Any]  # LaunchConfig.to_dict()
    nproc: int  # ranks on this node
    node_rank: int
    num_nodes: int
    master_addr: str  # node 0's address (node 0: its own, given by the engine)
    master_port: int  # 0 on node 0 = a free port, hosted by node 0
    timeout: float | None = None


@dataclass
class NodeOutcome:
    """What one node sends back when its ranks are done (or stopped, or failed)."""

    node_rank: int
    status: str  # "done", "failed", "timeout", "stopped"
    hostname: str = ""
    values: dict[int, bytes] = field(default_factory=dict)  # cloudpickled return values by rank
    logs: dict[int, str] = field(default_factory=dict)
    failures: list[RankFailure] = field(default_factory=list)  # .time in wall-clock seconds
    timeout_ranks: list[int] = field(default_factory=list)
    stacks: dict[int, str] = field(default_factory=dict)
    checkpoints: list[dict[str, Any]] = field(default_factory=list)  # completed saves (result.checkpoints)


Emit = Callable[[Any], None]


class NodeRun:
    """Plan this node's ranks (node 0 hosts the rendezvous store), then run them to the end."""

    def __init__(self, job: NodeJob, emit: Emit, say: Callable[[str], None]) -> None:
        self.job = job
        self.emit = emit
        self.stop_requested = threading.Event()
        self.supervisor: Supervisor | None = None
        self.plan = self._plan(job, say)

    @property
    def address(self) -> tuple[str, int]:
        """The rendezvous every node of this launch uses (known once node 0 is planned)."""
        request = self.plan.request
        return request.main_address, request.port

    def _plan(self, job: NodeJob, say: Callable[[str], None]) -> LaunchPlan:
        multi = job.num_nodes > 1
        cfg = LaunchConfig.from_dict(job.config).replace(
            num_machines=job.num_nodes,
            machine_rank=job.node_rank,
            num_processes=job.nproc * job.num_nodes,
            main_process_ip=job.master_addr if multi else None,
            main_process_port=job.master_port if multi else 0,  # one node: any free port
        )
        request = resolve_launch(cfg, "node", num_processes=job.nproc)
        for note in request.notes:
            say(f"notebook_launch: {note}")
        addr, port, store = planning.rendezvous(request, on_demand=True)  # hosted after the forks
        request = dataclasses.replace(  # the port node 0's store took (0 asked for any free one)
            request, port=port, config=request.config.replace(main_process_ip=addr, main_process_port=port)
        )
        fork = request.start_method == "fork"
        if fork:
            _warm_up(request.config)
        specs = planning.make_specs(request, (addr, port), None if fork else job.payload)
        plan = planning.plan_started_by(
            request,
            specs=specs,
            target=cloudpickle.loads(job.payload) if fork else None,
            timeout=job.timeout,
            store=store,
        )
        if job.node_rank != 0:
            plan.preflight = planning.main_machine_check(request, say)
        return plan

    def stop(self) -> None:
        """Stop this node's ranks (the notebook's Stop, or another node failed)."""
        self.stop_requested.set()

    def request_preemption(self, signum: int) -> None:
        """Ask every running rank of this node to stop after its current step (runtime/world/preemption.py)."""
        from ..launch.supervise.processes import signal_process

        for worker in self.supervisor.workers if self.supervisor else ():
            if worker.alive and worker.started:
                signal_process(worker, signum)

    def run(self, observers: list[Emit] | None = None) -> NodeOutcome:
        supervisor = Supervisor(
            self.plan, [self._forward, *(observers or [])], should_stop=self.stop_requested.is_set
        )
        self.supervisor = supervisor
        outcome = NodeOutcome(self.job.node_rank, "done", hostname=socket.gethostname())
        try:
            supervisor.run()
        except WorkerError:
            outcome.status = "failed"
        except LaunchTimeout as exc:
            outcome.status = "timeout"
            outcome.timeout_ranks, outcome.stacks = list(exc.running_ranks), dict(exc.stacks)
        except LaunchStopped:
            outcome.status = "stopped"
        outcome.values = {rank: cloudpickle.dumps(value) for rank, value in supervisor.record.values.items()}
        outcome.logs = supervisor.logs
        outcome.checkpoints = list(supervisor.record.checkpoints)
        outcome.failures = [_portable(failure) for failure in supervisor.record.failures]
        if outcome.failures and outcome.status == "done":
            outcome.status = "failed"
        return outcome

    def _forward(self, event: Any) -> None:
        """Every event the ranks' pipes produce goes to the notebook (launch/events.py's WORKER_EVENTS)."""
        if isinstance(event, WORKER_EVENTS):
            self.emit(event)


def _portable(failure: RankFailure) -> RankFailure:
    """A failure that travels: wall-clock time (monotonic clocks differ between machines), the
    exception kept only when it pickles."""
    wall = time.time() - (time.monotonic() - failure.time)
    exception = failure.exception
    try:
        cloudpickle.dumps(exception)
    except Exception:
        exception = None
    return dataclasses.replace(failure, time=wall, exception=exception)


def _warm_up(config: LaunchConfig) -> None:
    """What every forked worker would import on its own, imported once on the node."""
    from ..launch.warm.warmup import warm_up

    warm_up(config)
