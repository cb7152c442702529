"""`python -m notebook_launcher.clusters.ray_driver`: one launch's Ray driver, in its own process.

`ray.init`, the placement group and the NodeAgent actors live here, never in the notebook's kernel.
Ray's client leaves about ten native threads in a process after `ray.shutdown()` (gRPC's event
engine, its timers, a DNS resolver, the GCS client's I/O): in the kernel they went on resolving
and opening sockets every few seconds for as long as it lived, and every later local launch forked
ranks from a process with those threads running. With the driver here, the kernel keeps no thread,
handler or variable of Ray's, and a launch's end is this process's end.

Protocol (node_main.py's frames, both ways): the kernel writes ("start", (RayCluster, NodeJob)),
("poll", None), ("stop", None) and ("close", None); this process answers a start with ("say", text)
frames then ("done", None), a poll with ("done", (events, notes, finished)), and either with
("error", exception) when it raised. Stop and close are not answered; close (or the kernel's end of
the pipe) removes everything of the launch from the cluster and ends this process. It dies with the
thread of the kernel that started it (PR_SET_PDEATHSIG), as the kernel's own driver did: Ray then
removes the actors of a driver that is gone.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
from collections.abc import Callable
from typing import Any

from ..system.parent_death import die_with_parent
from .driver import crashed_outcome
from .node import NodeJob, NodeOutcome
from .node_main import FrameWriter, read_frame

DRAIN_TIMEOUT_SECONDS = 60.0


class RayDriver:
    """Starts, watches and removes one launch's actors and placement group (in this process)."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.ray: Any = None
        self.group: Any = None
        self.agents: list[Any] = []
        self.nproc = 1
        self.done: set[int] = set()

    def start(self, job: NodeJob, say: Callable[[str], None]) -> None:
        import ray

        self.ray = ray
        self.nproc = job.nproc
        ray.init(address=self.cluster.address, log_to_driver=False, runtime_env=self.cluster.runtime_env)
        self.group = self._placement_group(job)
        say(
            f"notebook_launch: Ray cluster {self.cluster.address or 'default'}: {job.num_nodes} node(s) x "
            f"{job.nproc} rank(s), each rank reserving {self.cluster.resources_per_worker}."
        )
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from .ray_agent import NodeAgent

        agent_class = self.ray.remote(max_concurrency=4)(NodeAgent)
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
        main_ip = ray.get(self.agents[0].node_ip.remote())
        addr, port = ray.get(self.agents[0].start.remote(_node_job(job, 0, main_ip, 0)))
        ray.get(
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

        from ..errors import ConfigError

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
        if self.ray is None or not self.ray.is_initialized():
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
        self.ray.shutdown()


def _node_job(job: NodeJob, node: int, addr: str, port: int) -> NodeJob:
    return NodeJob(job.payload, job.config, job.nproc, node, job.num_nodes, addr, port, job.timeout)


def _picklable(exc: BaseException) -> BaseException:
    """The exception itself when it survives the trip to the kernel, else its type and text."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__module__}.{type(exc).__name__}: {exc}")


def serve(commands: Any, send: Callable[[str, Any], None]) -> None:
    """Answer the kernel's commands until it says close or its end of the pipe is gone."""
    driver: RayDriver | None = None
    try:
        while (frame := read_frame(commands)) is not None:
            what, value = frame
            if what == "close":
                return
            try:
                if what == "start":
                    cluster, job = value
                    driver = RayDriver(cluster)
                    driver.start(job, lambda text: send("say", text))
                    send("done", None)
                elif what == "poll" and driver is not None:
                    send("done", driver.poll())
                elif what == "stop" and driver is not None:
                    driver.stop()
            except BaseException as exc:  # noqa: BLE001 - the kernel raises it in the cell
                if what != "stop":
                    send("error", _picklable(exc))
    finally:
        if driver is not None:
            driver.close()


def main() -> None:
    frames_fd = os.dup(1)
    os.dup2(2, 1)  # stray prints (Ray's) go to stderr, never into the frames
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C reaches the kernel, which says stop
    die_with_parent()
    serve(sys.stdin.buffer, FrameWriter(os.fdopen(frames_fd, "wb")))
    sys.stdout.flush()
    os._exit(0)  # ray.shutdown() ran in close(); nothing else to tear down


if __name__ == "__main__":
    main()
