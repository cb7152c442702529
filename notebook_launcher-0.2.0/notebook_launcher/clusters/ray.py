"""Ray: `notebook_launch(fn, cluster=RayCluster(...))` (or `cluster="ray"`).

Ray places the ranks and tells where they are; our launcher starts them. One placement group
bundle per node reserves the resources of that node's ranks (`resources_per_worker` × ranks per
node), spread over distinct machines (STRICT_SPREAD) when there are several nodes. In each bundle
one NodeAgent actor starts the node's ranks with the local launcher (ray_agent.py), so the
workers, their env contract and `Accelerator()` are exactly those of a local launch; node 0
hosts the rendezvous at the address Ray gives its node.

Why not Ray Train's TorchTrainer: it sets up the process group and its own environment itself,
gives back what rank 0 reports rather than every rank's return value, and streams output through
Ray's log forwarding — the launcher's contracts (every rank's value, per-rank live output,
WorkerError with the failing rank's traceback) would have to be rebuilt on top of it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError, install_hint
from .driver import crashed_outcome
from .node import NodeJob, NodeOutcome

DRAIN_TIMEOUT_SECONDS = 60.0


@dataclass
class RayCluster:
    """Where: a Ray cluster. `address`: None (RAY_ADDRESS, else a running local cluster, else a new
    local one), "auto", "host:port" or "ray://host:port". `num_nodes` machines, each running
    `num_processes` ranks; `resources_per_worker` is what one rank needs, e.g. {"CPU": 2, "GPU": 1}."""

    address: str | None = None
    num_nodes: int = 1
    resources_per_worker: dict[str, float] | None = None
    placement_timeout: float = 120.0
    runtime_env: dict[str, Any] | None = None
    name: str = field(default="ray", init=False)

    def __post_init__(self) -> None:
        if isinstance(self.num_nodes, bool) or not isinstance(self.num_nodes, int) or self.num_nodes < 1:
            raise ConfigError(
                f"RayCluster(num_nodes={self.num_nodes!r}): give a positive whole number of machines."
            )
        resources = dict(self.resources_per_worker or {"CPU": 1})
        for key, value in resources.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ConfigError(
                    f"RayCluster(resources_per_worker={{{key!r}: {value!r}}}): each amount must be a number >= 0, "
                    'e.g. {"CPU": 1, "GPU": 1}.'
                )
        self.resources_per_worker = resources

    def default_processes(self) -> int:
        return 1

    def backend(self) -> RayBackend:
        return RayBackend(self)


class RayBackend:
    """Starts, watches and removes one launch's actors and placement group."""

    name = "ray"

    def __init__(self, cluster: RayCluster) -> None:
        self.cluster = cluster
        self.ray: Any = None
        self.owns_connection = False
        self.group: Any = None
        self.agents: list[Any] = []
        self.nproc = 1
        self.done: set[int] = set()

    def start(self, job: NodeJob, say: Callable[[str], None]) -> None:
        self.ray = _import_ray()
        self.nproc = job.nproc
        if not self.ray.is_initialized():
            self.kernel_state = _KernelState()  # ray.init sets handlers and variables; close() undoes that
            self.ray.init(
                address=self.cluster.address, log_to_driver=False, runtime_env=self.cluster.runtime_env
            )
            self.owns_connection = True
        self.group = self._placement_group(job)
        say(
            f"notebook_launch: Ray cluster {self.cluster.address or 'default'}: {job.num_nodes} node(s) x "
            f"{job.nproc} rank(s), each rank reserving {self.cluster.resources_per_worker}."
        )
        agent_class = self.ray.remote(max_concurrency=4)(_agent_class())
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        for node in range(job.num_nodes):
            bundle = self._bundle(job.nproc)
            self.agents.append(
                agent_class.options(
                    num_cpus=bundle.pop("CPU", 0),
                    num_gpus=bundle.pop("GPU", 0),
                    resources=bundle,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(self.group, node),
                ).remote()
            )
        main_ip = self.ray.get(self.agents[0].node_ip.remote())
        first = _node_job(job, 0, main_ip, 0)
        addr, port = self.ray.get(self.agents[0].start.remote(first))
        self.ray.get(
            [
                agent.start.remote(_node_job(job, node, addr, port))
                for node, agent in enumerate(self.agents)
                if node
            ]
        )

    def _bundle(self, nproc: int) -> dict[str, float]:
        return {
            key: value * nproc for key, value in (self.cluster.resources_per_worker or {}).items() if value
        }

    def _placement_group(self, job: NodeJob) -> Any:
        from ray.util.placement_group import placement_group, remove_placement_group

        bundles = [self._bundle(job.nproc) for _ in range(job.num_nodes)]
        strategy = "STRICT_SPREAD" if job.num_nodes > 1 else "PACK"
        group = placement_group(bundles, strategy=strategy)
        ready, _ = self.ray.wait([group.ready()], timeout=self.cluster.placement_timeout)
        if not ready:
            remove_placement_group(group)
            raise ConfigError(
                f"The Ray cluster cannot place {job.num_nodes} node(s) of {bundles[0]} ({strategy}: one node per "
                f"machine) within {self.cluster.placement_timeout:.0f} s; it has {self.ray.available_resources()} "
                "free. Ask for fewer ranks (num_processes), smaller resources_per_worker or fewer num_nodes, or add "
                "machines to the cluster."
            )
        return group

    def poll(self) -> tuple[list[Any], list[str], dict[int, NodeOutcome]]:
        live = [(node, agent) for node, agent in enumerate(self.agents) if node not in self.done]
        refs = [agent.drain.remote() for _, agent in live]
        events: list[Any] = []
        notes: list[str] = []
        finished: dict[int, NodeOutcome] = {}
        for (node, _), ref in zip(live, refs, strict=True):
            try:
                node_events, node_notes, outcome, crash = self.ray.get(ref, timeout=DRAIN_TIMEOUT_SECONDS)
            except Exception as exc:  # the actor (or its machine) died
                node_events, node_notes, outcome = [], [], None
                crash = f"{type(exc).__name__}: {exc}"
            events += node_events
            notes += node_notes
            if crash is not None and outcome is None:
                outcome = crashed_outcome(node, self.nproc, "the node's launcher on Ray failed", crash)
            if outcome is not None:
                finished[node] = outcome
                self.done.add(node)
        return events, notes, finished

    def stop(self) -> None:
        for node, agent in enumerate(self.agents):
            if node not in self.done:
                agent.stop.remote()

    def close(self) -> None:
        """No actor, subprocess, worker or placement group of this launch is left on the cluster."""
        if self.ray is None:
            return
        try:
            if self.agents:
                self.ray.get([agent.kill.remote() for agent in self.agents], timeout=30)
        except Exception:
            pass
        for agent in self.agents:
            try:
                self.ray.kill(agent, no_restart=True)
            except Exception:
                pass
        if self.group is not None:
            from ray.util.placement_group import remove_placement_group

            try:
                remove_placement_group(self.group)
            except Exception:
                pass
        if self.owns_connection:
            self.ray.shutdown()
            self.kernel_state.restore()


class _KernelState:
    """The signal handlers and environment of the calling process, to put back after ray.shutdown()."""

    SIGNALS = ("SIGINT", "SIGTERM")

    def __init__(self) -> None:
        import os
        import signal
        import threading

        self.environ = dict(os.environ)
        main = threading.current_thread() is threading.main_thread()
        self.handlers = (
            {name: signal.getsignal(getattr(signal, name)) for name in self.SIGNALS} if main else {}
        )

    def restore(self) -> None:
        import os
        import signal

        for key in set(os.environ) - set(self.environ):
            del os.environ[key]
        os.environ.update(self.environ)
        for name, handler in self.handlers.items():
            if handler is not None and signal.getsignal(getattr(signal, name)) is not handler:
                signal.signal(getattr(signal, name), handler)


def _node_job(job: NodeJob, node: int, addr: str, port: int) -> NodeJob:
    return NodeJob(job.payload, job.config, job.nproc, node, job.num_nodes, addr, port, job.timeout)


def _agent_class() -> type:
    from .ray_agent import NodeAgent

    return NodeAgent


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "cluster='ray' needs Ray in this kernel and on the cluster, the same version as the cluster's: "
            f"{install_hint('ray', 'ray')}."
        ) from None
    return ray
