"""Ray: `notebook_launch(fn, cluster=RayCluster(...))` (or `cluster="ray"`).

Ray places the ranks and tells where they are; our launcher starts them. The Ray driver (`ray.init`,
the placement group, the actors) runs in a process of its own (ray_driver.py), never in the kernel.
One placement group bundle per node reserves the resources of that node's ranks
(`resources_per_worker` × ranks per node), spread over distinct machines (STRICT_SPREAD) when there
are several nodes. In each bundle
one NodeAgent actor starts the node's ranks with the local launcher (ray_agent.py), so the
workers, their env contract and `Accelerator()` are exactly those of a local launch; node 0
hosts the rendezvous at the address Ray gives its node.

Why not Ray Train's TorchTrainer: it sets up the process group and its own environment itself,
gives back what rank 0 reports rather than every rank's return value, and streams output through
Ray's log forwarding — the launcher's contracts (every rank's value, per-rank live output,
WorkerError with the failing rank's traceback) would have to be rebuilt on top of it.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import ConfigError, install_hint
from .node import NodeJob, NodeOutcome
from .node_main import FrameWriter, read_frame

CLOSE_SECONDS = 60.0  # the driver's close: its agents' kill (30 s at most), the placement group, shutdown


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
    """The kernel's side of one launch on Ray: a driver process (ray_driver.py) does the Ray work, so
    no thread, handler or variable of Ray's stays in the kernel after the launch."""

    name = "ray"

    def __init__(self, cluster: RayCluster) -> None:
        self.cluster = cluster
        self.process: subprocess.Popen[bytes] | None = None
        self.write: FrameWriter | None = None  # frames to the driver's stdin

    def start(self, job: NodeJob, say: Callable[[str], None]) -> None:
        _check_ray_installed()
        cluster = replace(self.cluster, address=self.cluster.address or _kernels_connection())
        self.process = subprocess.Popen(
            [sys.executable, "-m", "notebook_launcher.clusters.ray_driver"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self.process.stdin is not None
        self.write = FrameWriter(self.process.stdin)
        self._send("start", (cluster, job))
        while True:
            kind, value = self._answer("starting the launch on Ray")
            if kind != "say":
                return
            say(value)

    def poll(self) -> tuple[list[Any], list[str], dict[int, NodeOutcome]]:
        self._send("poll", None)
        _, value = self._answer("watching the ranks on Ray")
        events, notes, finished = value
        return events, notes, finished

    def stop(self) -> None:
        self._send("stop", None)

    def close(self) -> None:
        """The driver removes every actor, worker and the placement group of this launch, disconnects
        and ends; one that does not within CLOSE_SECONDS is killed (Ray then removes what it owned)."""
        process, self.process = self.process, None
        if process is None:
            return
        try:
            self._send("close", None)
        finally:
            self.write = None
            assert process.stdin is not None and process.stdout is not None
            try:
                process.stdin.close()
            except BrokenPipeError:  # the driver died: what was still buffered for it has no reader
                pass
            try:
                process.wait(CLOSE_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            process.stdout.close()

    def _send(self, kind: str, value: Any) -> None:
        if self.write is None:
            return
        try:
            self.write(kind, value)
        except (BrokenPipeError, ValueError):  # the driver ended; _answer (or close) says how
            pass

    def _answer(self, doing: str) -> tuple[str, Any]:
        assert self.process is not None and self.process.stdout is not None
        frame = read_frame(self.process.stdout)
        if frame is None:
            code = self.process.wait()
            raise RuntimeError(
                f"The Ray driver process (python -m notebook_launcher.clusters.ray_driver) ended while {doing}, "
                f"exit code {code}; anything it printed went to the kernel's stderr."
            )
        kind, value = frame
        if kind == "error":
            raise value
        return kind, value


def _kernels_connection() -> str | None:
    """The cluster this kernel is connected to with its own ray.init(), which the launch then uses."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    return str(ray.get_runtime_context().gcs_address)


def _check_ray_installed() -> None:
    """Ray is imported by the driver process only; here, a clear error when it is not installed."""
    if importlib.util.find_spec("ray") is None:
        raise ConfigError(
            "cluster='ray' needs Ray in this kernel and on the cluster, the same version as the cluster's: "
            f"{install_hint('ray', 'ray')}."
        )
