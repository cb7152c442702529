"""Who this process is in the run: rank, world, device, process group. One per process, resettable.

Built from the standard torch variables (RANK, WORLD_SIZE, ...) that notebook_launch, the CLI and
plain torchrun all set. Unlike Accelerate, a world of several CPU processes gets a real gloo group
without any `cpu=True`.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ..config import LaunchConfig
from ..errors import AcceleratorError


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


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise AcceleratorError(f"Environment variable {name}={raw!r} must be an integer.") from None


def _pick_device(config: LaunchConfig, cpu: bool, local_rank: int) -> torch.device:
    if cpu or config.use_cpu:
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available() and _env_int("WORLD_SIZE", 1) == 1:
        return torch.device("mps")
    return torch.device("cpu")


def get_state(
    config: LaunchConfig | None = None, *, cpu: bool = False, timeout: datetime.timedelta | None = None
) -> ProcessState:
    """The process state, created (and the process group initialised) on first use."""
    global _STATE
    if _STATE is not None:
        return _STATE
    config = config or LaunchConfig()
    world_size = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    local_rank = _env_int("LOCAL_RANK", rank)
    local_world = _env_int("LOCAL_WORLD_SIZE", world_size)
    node_rank = _env_int("GROUP_RANK", _env_int("NODE_RANK", 0))
    device = _pick_device(config, cpu, local_rank)
    backend = None
    owns = False
    if dist.is_available() and dist.is_initialized():
        backend = dist.get_backend()
        world_size, rank = dist.get_world_size(), dist.get_rank()
    elif world_size > 1:
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
