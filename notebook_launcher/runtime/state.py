"""Who this process is in the run: rank, world, device, process group. One per process, resettable.

The world comes from environments.py: torch's variables (RANK, WORLD_SIZE, ...) that
notebook_launch, the CLI and plain torchrun set, or a scheduler's (srun, mpirun, a Kubeflow
PyTorchJob). For a scheduler's world this process gets torch's variables as torchrun would have set
them (init_process_group, DeepSpeed and user code read them), and — when the world spans machines
and the user chose no interface — GLOO_SOCKET_IFNAME for the interface that reaches the main node.
Unlike Accelerate, a world of several CPU processes gets a real gloo group without any `cpu=True`.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ..config import LaunchConfig
from ..errors import ClusterEnvironmentError
from ..network import socket_interface_env
from .environments import World, detect_world


@dataclass
class ProcessState:
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int
    device: torch.device
    backend: str | None
    owns_process_group: bool

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main_process(self) -> bool:
        return self.rank == 0

    @property
    def is_local_main_process(self) -> bool:
        return self.local_rank == 0

    @property
    def is_last_process(self) -> bool:
        return self.rank == self.world_size - 1


_STATE: ProcessState | None = None
# Set by notebook_launch's worker, which exits with os._exit once the result is sent: there the group
# is left to die with the process (tearing down gloo while a DDP model still holds it can hang).
_EXIT_WITHOUT_TEARDOWN = False


def exit_without_teardown() -> None:
    """Called by the notebook_launch worker: end_training() keeps the process group alive."""
    global _EXIT_WITHOUT_TEARDOWN
    _EXIT_WITHOUT_TEARDOWN = True


def teardown_on_end() -> bool:
    """Whether end_training() should destroy the process group (torchrun scripts: yes)."""
    return not _EXIT_WITHOUT_TEARDOWN


def _pick_device(config: LaunchConfig, cpu: bool, world: World) -> torch.device:
    if cpu or config.use_cpu:
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda", world.local_rank % torch.cuda.device_count())
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available() and world.world_size == 1:
        return torch.device("mps")
    return torch.device("cpu")


def _enter_world(world: World) -> None:
    """Give a scheduler-started process torch's variables (and a network interface), as torchrun would."""
    if world.source in ("torchrun", "torch variables"):
        return
    os.environ.update(world.torch_env())
    if world.spans_machines and world.master_addr:
        env, note = socket_interface_env(world.master_addr, world.master_port or 9, peer=world.peer_host)
        os.environ.update(env)
        if world.local_rank == 0:
            print(f"notebook_launcher: rank {world.rank} ({world.source}): {note}", flush=True)


def _check_rendezvous(world: World) -> None:
    missing = [
        name
        for name, value in (("MASTER_ADDR", world.master_addr), ("MASTER_PORT", world.master_port))
        if not value
    ]
    if missing:
        raise ClusterEnvironmentError(
            f"This process is rank {world.rank} of {world.world_size} ({world.source}) but {' and '.join(missing)} "
            "is not set, so it cannot find the others: set MASTER_ADDR to the main machine's address and "
            "MASTER_PORT to a free port, the same for every process."
        )


def get_state(
    config: LaunchConfig | None = None, *, cpu: bool = False, timeout: datetime.timedelta | None = None
) -> ProcessState:
    """The process state, created (and the process group initialised) on first use."""
    global _STATE
    if _STATE is not None:
        return _STATE
    config = config or LaunchConfig()
    world = detect_world()
    if world.note and world.rank == 0:
        print(f"notebook_launcher: {world.note}", flush=True)
    rank, world_size, local_rank = world.rank, world.world_size, world.local_rank
    local_world, node_rank = world.local_world_size, world.node_rank
    device = _pick_device(config, cpu, world)
    backend = None
    owns = False
    if dist.is_available() and dist.is_initialized():
        backend = dist.get_backend()
        world_size, rank = dist.get_world_size(), dist.get_rank()
    elif world_size > 1:
        _check_rendezvous(world)
        _enter_world(world)
        backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda" and local_world > torch.cuda.device_count():
            # NCCL refuses two ranks on one GPU; gloo runs them (slower), which is what a user
            # asking for more processes than GPUs on one machine wants for a test run.
            backend = "gloo"
            if local_rank == 0:
                print(
                    f"notebook_launcher: {local_world} processes share {torch.cuda.device_count()} GPU(s); "
                    "using the gloo backend because NCCL cannot put two ranks on one GPU."
                )
        if device.type == "cuda":
            torch.cuda.set_device(device)
        kwargs = {"backend": backend, "rank": rank, "world_size": world_size}
        if timeout is not None:
            kwargs["timeout"] = timeout
        if backend == "nccl":
            kwargs["device_id"] = device
        dist.init_process_group(**kwargs)
        owns = True
    _STATE = ProcessState(rank, local_rank, world_size, local_world, node_rank, device, backend, owns)
    return _STATE


def current_state() -> ProcessState | None:
    """The state if one was created, without creating it."""
    return _STATE


def reset_state(destroy_process_group: bool = True) -> None:
    """Forget the state (and tear down the group we created) so a new Accelerator starts fresh."""
    global _STATE
    if _STATE is not None and _STATE.owns_process_group and destroy_process_group:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    _STATE = None
