"""Who this process is in the run: rank, world, device, process group. One per process, resettable.

The world comes from environments.py: torch's variables (RANK, WORLD_SIZE, ...) that
notebook_launch, the CLI and plain torchrun set, or a scheduler's (srun, mpirun, a Kubeflow
PyTorchJob). For a scheduler's world this process gets torch's variables as torchrun would have set
them (init_process_group, DeepSpeed and user code read them), and — when the world spans machines
and the user chose no interface — GLOO_SOCKET_IFNAME for the interface that reaches the main node.
Unlike Accelerate, a world of several CPU processes gets a real gloo group without any `cpu=True`.
"""

from __future__ import annotations

import atexit
import datetime
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.distributed as dist

from ...config import LaunchConfig
from ...errors import AcceleratorError, ClusterEnvironmentError
from ...system.network import socket_interface_env
from ...system.store import file_store
from . import collective_log
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
_ON_RESET: list[Callable[[], None]] = []  # see on_reset
# Set by notebook_launch's worker, which exits with os._exit once the result is sent: there the group
# is left to die with the process (tearing down gloo while a DDP model still holds it can hang).
_EXIT_WITHOUT_TEARDOWN = False
# Groups destroyed in such a worker, kept referenced until its os._exit. The last reference to a gloo
# group is often a DDP model's Reducer, freed when the user's function returns: ~ProcessGroupGloo then
# joins the group's threads with the GIL held, while a thread finishing a collective waits for the GIL
# to free its tensors, and the rank hangs for good (Accelerate's test_grad_sync after its
# PartialState().destroy_process_group(); py-spy: std::thread::join under ~ProcessGroupGloo, the
# group's runLoop thread in gil_scoped_acquire under ~AsyncAllgatherWork).
_KEPT_UNTIL_EXIT: list[Any] = []


def exit_without_teardown() -> None:
    """Called by the notebook_launch worker: end_training() keeps the process group alive."""
    global _EXIT_WITHOUT_TEARDOWN
    _EXIT_WITHOUT_TEARDOWN = True


def teardown_on_end() -> bool:
    """Whether end_training() should destroy the process group (torchrun scripts: yes)."""
    return not _EXIT_WITHOUT_TEARDOWN


FORKED_AFTER_CUDA = (
    "This worker was forked from a process that had already initialised the CUDA driver, so it cannot use "
    "CUDA (torch would fail with 'Cannot re-initialize CUDA in forked subprocess'). Typical causes in the "
    "notebook: torch.cuda.is_available() ran without PYTORCH_NVML_BASED_CUDA_CHECK=1, or a MIG GPU made torch "
    "count devices through the driver. Fix: launch with start_method='spawn'; or restart the kernel and set "
    "os.environ['PYTORCH_NVML_BASED_CUDA_CHECK'] = '1' before anything asks torch about GPUs; or pass "
    "use_cpu=True to train on the CPU."
)


def _forked_after_cuda_with_gpus() -> bool:
    """In a child forked after the parent initialised the CUDA driver, on a machine with GPUs.

    torch flags every child of a process that asked the CUDA runtime anything ("bad fork"), even
    on a machine without an NVIDIA driver (seen with a CUDA build of torch on a CPU machine): only
    when the driver library was really loaded (its mapping is inherited) is CUDA unusable here.
    GPUs are then counted through NVML only: in such a child the driver may answer "no GPU", and
    the run would silently train on the CPU.
    """
    if not torch.cuda._is_in_bad_fork():
        return False
    from ...system.hardware import loaded_libcuda

    if loaded_libcuda() is None:
        return False
    try:
        return torch.cuda._device_count_nvml() != 0  # -1 (NVML failed, e.g. MIG) counts as GPUs
    except Exception:
        return True


def _pick_device(config: LaunchConfig, cpu: bool, world: World) -> torch.device:
    if cpu or config.runs_on_cpu:
        return torch.device("cpu")
    if _forked_after_cuda_with_gpus():
        raise AcceleratorError(FORKED_AFTER_CUDA)
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


def _attempt_store(world: World, timeout: datetime.timedelta | None) -> dict[str, Any]:
    """The launch's rendezvous file on one machine (system/store.py: no TCP, so no DNS lookup),
    else a restarted attempt's own key space in the launcher's store.

    torchrun's static rendezvous keeps one store across restarts, and torch (2.6 on) no longer
    prefixes the workers' keys per attempt: a restarted group read the dead attempt's gloo addresses
    and failed ("Connection refused") or hung. notebook_launch starts a fresh store for each attempt;
    the prefix is harmless there.
    """
    from torch.distributed.constants import default_pg_timeout

    in_file = file_store((timeout or default_pg_timeout).total_seconds())
    if in_file is not None:
        return {"store": in_file}
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    if attempt in ("", "0") or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return {}
    port = cast(int, world.master_port)  # torchelastic's agent store: MASTER_PORT is set
    client = dist.TCPStore(
        str(world.master_addr), int(port), is_master=False, timeout=timeout or default_pg_timeout
    )
    return {"store": dist.PrefixStore(f"notebook_launcher/attempt_{attempt}", client)}


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
    config: LaunchConfig | None = None,
    *,
    cpu: bool = False,
    timeout: datetime.timedelta | None = None,
    backend: str | None = None,
    init_method: str | None = None,
) -> ProcessState:
    """The process state, created (and the process group initialised) on first use.

    backend / init_method / timeout are InitProcessGroupKwargs': the user's choice wins over ours.
    """
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
    owns = False
    if dist.is_available() and dist.is_initialized():
        backend = dist.get_backend()
        world_size, rank = dist.get_world_size(), dist.get_rank()
    elif world_size > 1:
        if init_method is None:  # a user's init_method (file://, tcp://) needs no MASTER_ADDR/PORT
            _check_rendezvous(world)
        _enter_world(world)
        backend = (
            _check_backend(backend, device) if backend else _default_backend(device, local_world, local_rank)
        )
        if device.type == "cuda":
            torch.cuda.set_device(device)
        kwargs: dict[str, Any] = {"backend": backend, "rank": rank, "world_size": world_size}
        if init_method is not None:
            kwargs["init_method"] = init_method
        if timeout is not None:
            kwargs["timeout"] = timeout
        if backend == "nccl":
            kwargs["device_id"] = device
        collective_log.install()  # a spawned worker may import torch only now; a no-op outside a launch
        if init_method is None:
            kwargs.update(_attempt_store(world, timeout))
        dist.init_process_group(**kwargs)
        if backend == "gloo":
            _wait_for_every_ranks_pairs()
        owns = True
        if "nccl" not in str(backend):
            atexit.unregister(_destroy_owned_group_at_exit)  # once, however many groups a script makes
            atexit.register(_destroy_owned_group_at_exit)
    else:
        backend = None
    _STATE = ProcessState(rank, local_rank, world_size, local_world, node_rank, device, backend, owns)
    return _STATE


def _wait_for_every_ranks_pairs() -> None:
    """Return from the group's initialisation only once every rank has finished its own.

    torch's init_process_group has no barrier at its end (TORCH_DIST_INIT_BARRIER=0 by default), and
    gloo's connecting side counts its pair as connected once its connection is made, before the
    other side has accepted it. A rank with little to do can then return, finish and exit, closing
    its sockets while its peer is still connecting: the peer fails with "Gloo connectFullMesh failed
    ... Connection closed by peer", whatever the store (file or TCP): raw torch lost 37 of 1,200
    launches so on a loaded machine, with torch's own barrier at the end 0 (benchmarks/
    concurrent_launches.py). A gloo barrier cannot complete before every pair is up on both sides.
    (The barrier once ran only after a FileStore meeting, and the store that replaced it is no
    FileStore: the race came back unseen.)
    """
    dist.distributed_c10d.barrier()  # torch's own: not a collective of the user's (collective_log)


def _default_backend(device: torch.device, local_world: int, local_rank: int) -> str:
    if device.type != "cuda":
        return "gloo"
    if local_world > torch.cuda.device_count():
        # NCCL refuses two ranks on one GPU; gloo runs them (slower), which is what a user
        # asking for more processes than GPUs on one machine wants for a test run.
        if local_rank == 0:
            print(
                f"notebook_launcher: {local_world} processes share {torch.cuda.device_count()} GPU(s); "
                "using the gloo backend because NCCL cannot put two ranks on one GPU."
            )
        return "gloo"
    return "nccl"


def _check_backend(backend: str, device: torch.device) -> str:
    """InitProcessGroupKwargs(backend=...): a name torch knows, and one that can run on this device."""
    parts = [part.rpartition(":")[2].strip().lower() for part in str(backend).split(",")]
    known = [name for name in dist.Backend.backend_list if name not in ("undefined", "fake")]
    if not all(part in known for part in parts):
        raise AcceleratorError(
            f"InitProcessGroupKwargs(backend={backend!r}) is not a torch.distributed backend; use 'gloo', 'nccl' "
            f"(CUDA GPUs), another of {known}, or a device map such as 'cpu:gloo,cuda:nccl'."
        )
    if "nccl" in parts and len(parts) == 1 and device.type != "cuda":
        raise AcceleratorError(
            f"InitProcessGroupKwargs(backend='nccl') needs CUDA GPUs, but this process runs on {device.type!r}; "
            "use backend='gloo' (or leave it unset)."
        )
    return backend


def _destroy_owned_group_at_exit() -> None:
    """A script that never calls `end_training()` leaves its gloo group to C++ static destruction,
    where torch 2.13 aborts about one exit in six ("terminate called without an active exception",
    SIGABRT) although the script succeeded. Destroying the group while Python still runs is clean.
    NCCL groups are left to torch: their teardown can wait on a peer, which an exit must not."""
    if _STATE is not None and _STATE.owns_process_group and dist.is_available() and dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - exiting anyway; a failed teardown must not mask the exit code
            pass


def _every_group() -> list[Any]:
    """The default group and every group made beside it (torch keeps them in its private world map)."""
    world = getattr(dist.distributed_c10d, "_world", None)
    groups = list(getattr(world, "pg_map", {}) or {})
    return groups if groups else [dist.group.WORLD]


def current_state() -> ProcessState | None:
    """The state if one was created, without creating it."""
    return _STATE


def reset_state(destroy_process_group: bool = True) -> None:
    """Forget the state (and tear down the group we created) so a new Accelerator starts fresh:
    also the shared AcceleratorState, PartialState and GradientState that Accelerate's API hands out."""
    global _STATE
    if _STATE is not None and _STATE.owns_process_group and destroy_process_group:
        if dist.is_available() and dist.is_initialized():
            if _EXIT_WITHOUT_TEARDOWN:
                _KEPT_UNTIL_EXIT.extend(_every_group())
            dist.destroy_process_group()
    _STATE = None
    for forget in _ON_RESET:
        forget()


def on_reset(forget: Callable[[], None]) -> None:
    """Call `forget` at each reset_state(): the layers built on this state (shared_state.py's
    PartialState/AcceleratorState/GradientState) register here, so this module never reaches up."""
    if forget not in _ON_RESET:
        _ON_RESET.append(forget)
