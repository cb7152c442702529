"""A resolved launch (resolution/: LaunchRequest) turned into what the Supervisor carries out: the
rendezvous store hosted here, each worker's env, how workers start — a LaunchPlan. Nothing is
decided again here.

Nothing here changes the caller's process: no os.environ writes, no signal handlers, no CUDA.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..config import LaunchConfig, config_to_env, worker_env
from ..errors import ConfigError
from ..resolution import LaunchRequest
from ..system.network import wait_for_main
from ..system.store import host_store
from .result import LaunchStopped
from .supervise.store_on_demand import StoreOnDemand
from .worker.entry import WorkerSpec


@dataclass
class LaunchPlan:
    """Everything decided before any process starts."""

    context: Any  # a torch.multiprocessing context
    specs: list[WorkerSpec]
    target: (
        tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]] | None
    )  # (fn, args, kwargs) handed over by fork
    request: LaunchRequest  # what the launch was resolved to (resolution/)
    timeout: float | None = None
    store: Any = None  # the TCPStore this process hosts for the workers' rendezvous
    preflight: Callable[[Callable[[], bool]], None] = lambda should_stop: None  # before workers start
    pool: Any = None  # the warm pool whose workers run a "forkserver" launch (pool.py)

    @property
    def config(self) -> LaunchConfig:
        """The LaunchConfig the workers get (the request's)."""
        return self.request.config

    @property
    def start_method(self) -> str:
        return self.request.start_method

    @property
    def world_size(self) -> int:
        return self.request.world_size


def check_call(fn: Any, args: Any, timeout: Any) -> None:
    """The function, its positional arguments and the timeout, checked before anything starts."""
    if not callable(fn):
        raise ConfigError(f"notebook_launch needs a function to run; got {type(fn).__name__} {fn!r}.")
    if not isinstance(args, (tuple, list)):
        raise ConfigError(
            f"args must be a tuple of positional arguments; got {type(args).__name__}. Use args=(x,)."
        )
    if timeout is not None and (not isinstance(timeout, (int, float)) or timeout <= 0):
        raise ConfigError(f"timeout={timeout!r} must be a positive number of seconds.")


def plan_started_by(request: LaunchRequest, **fields: Any) -> LaunchPlan:
    """The LaunchPlan of `request` (with `fields`: specs, target, timeout, store, preflight), its
    workers started by the request's method: "forkserver" means the warm pool (its server, torch
    preloaded), any other method Python's multiprocessing context. That is the context
    torch.multiprocessing hands out too: `import torch` registers torch's tensor reductions on it,
    so a kernel with torch shares tensors as before and one without never imports torch."""
    import multiprocessing as mp

    from .warm.pool import warm_pool

    method = request.start_method
    pool = warm_pool() if method == "forkserver" else None
    context = pool.ensure_server() if pool else mp.get_context(method)
    return LaunchPlan(context=context, pool=pool, request=request, **fields)


def rendezvous(request: LaunchRequest, on_demand: bool = False) -> tuple[str, int, Any]:
    """(master address, port, store) for this launch, at the request's address and port.

    The machine with rank 0 hosts torch's TCPStore in this process, bound before any worker starts
    (port 0 = the OS picks a free one), and every worker connects to it as a client, as torchrun's
    agent does (TORCHELASTIC_USE_AGENT_STORE). No window in which another program can take the
    port, and no stale store from an earlier launch: the store lives exactly as long as the launch.
    on_demand (launches the supervisor runs): the port is bound now and the TCPStore hosted only
    when a connection arrives, which the supervisor watches for once every rank has started. On one
    machine the ranks meet in a file (system/store.py), so it is hosted only for a rank's own
    init_process_group. Over several machines it is hosted right after this machine's ranks are
    forked, never before: its server thread formats each peer's address with getnameinfo, which
    holds glibc's resolver lock for a moment, and a rank forked in that moment inherits the lock
    held and hangs at its own first lookup (its TCPStore connect; seen in a two-machine rehearsal).
    """
    config = request.config
    if config.machine_rank != 0:
        return request.main_address, request.port, None
    store = _host_store(request.store_bind, request.port, on_demand=on_demand)
    return request.main_address, store.port, store


def main_machine_check(
    request: LaunchRequest, say: Callable[[str], None]
) -> Callable[[Callable[[], bool]], None]:
    """Over several machines, the check run before any worker starts that the main machine's port
    answers (each machine waits for machine 0's launcher, in any start order); nothing on one."""
    if request.config.num_machines == 1:
        return lambda should_stop: None

    def reach_main(should_stop: Callable[[], bool]) -> None:
        if not wait_for_main(
            request.main_address,
            request.port,
            say=lambda line: say(f"notebook_launch: {line}"),
            should_stop=should_stop,
        ):
            raise LaunchStopped("The launch was stopped while waiting for the main machine.")

    return reach_main


def _host_store(bind: str, port: int, on_demand: bool) -> Any:
    try:
        if on_demand:
            return StoreOnDemand(bind, port, timeout_s=30 * 60)
        return host_store(bind, port, timeout_s=30 * 60)
    except (OSError, RuntimeError) as exc:  # DistNetworkError subclasses RuntimeError
        where = f"{bind}:{port}" if bind else f"port {port}"
        raise ConfigError(
            f"Could not open the rendezvous store on {where}: {exc}. Pass another master_port."
        ) from None


def make_specs(
    request: LaunchRequest,
    master: tuple[str, int],
    payload: bytes | None,
    extra_env: dict[str, str] | None = None,
) -> list[WorkerSpec]:
    """One WorkerSpec per local rank, each with the full env contract."""
    config = request.config
    nproc = request.local_processes
    # The workers join the store this launcher hosts, as torchrun's workers join their agent's. torch
    # 2.4 (checked; 2.6 no longer) builds the store's key prefix from TORCHELASTIC_RESTART_COUNT and
    # fails without it (KeyError); a launch starts as attempt 0 (launch/faults/restarts.py counts up).
    extra_env = {
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "TORCHELASTIC_RESTART_COUNT": "0",
        **request.network_env,
        **request.rendezvous_env,
        **(extra_env or {}),
    }
    if config.debug:
        extra_env.setdefault("ACCELERATE_DEBUG_MODE", "true")  # Accelerate's debug: collectives check shapes
    threads = request.threads_per_rank  # applied with torch.set_num_threads in the worker (entry.py)
    config_env = config_to_env(config, cpu_world=request.cpu_world)  # the same for every rank
    specs = []
    for local_rank in range(nproc):
        rank = config.machine_rank * nproc + local_rank
        env = worker_env(
            rank=rank,
            local_rank=local_rank,
            world_size=request.world_size,
            local_world_size=nproc,
            group_rank=config.machine_rank,
            master_addr=master[0],
            master_port=master[1],
            config=config,
            cpu_world=request.cpu_world,
            config_env=config_env,
        )
        if threads is not None:
            env["OMP_NUM_THREADS"] = str(threads)
        if request.visible_devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = request.visible_devices
        env.update(extra_env)
        specs.append(WorkerSpec(rank=rank, env=env, payload=payload, threads=threads))
    return specs
