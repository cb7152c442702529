"""Decisions made before any worker starts: config, process count, start method, ports, env —
gathered into a LaunchPlan, which the Supervisor carries out.

Nothing here changes the caller's process: no os.environ writes, no signal handlers, no CUDA.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..config import LaunchConfig, resolve_config, worker_env
from ..errors import ConfigError
from ..system.network import DEFAULT_PORT, LOOPBACK, rendezvous_port, wait_for_main, workers_interface_env
from ..system.store import StoreOnDemand, host_store, store_bind_address
from .result import LaunchStopped
from .worker.entry import WorkerSpec


@dataclass
class LaunchPlan:
    """Everything decided before any process starts."""

    context: Any  # a torch.multiprocessing context
    start_method: str
    specs: list[WorkerSpec]
    target: tuple[Any, tuple, dict] | None  # (fn, args, kwargs) handed over by fork
    world_size: int
    config: Any
    timeout: float | None = None
    store: Any = None  # the TCPStore this process hosts for the workers' rendezvous
    preflight: Callable[[Callable[[], bool]], None] = lambda should_stop: None  # before workers start
    pool: Any = None  # the warm pool whose workers run a "forkserver" launch (pool.py)


START_METHODS = ("auto", "fork", "spawn", "forkserver")


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


def plan_started_by(method: str, **fields: Any) -> LaunchPlan:
    """The LaunchPlan of `fields` whose workers start by `method`: "forkserver" means the warm pool
    (its server, torch preloaded), any other method Python's multiprocessing context. That is the
    context torch.multiprocessing hands out too: `import torch` registers torch's tensor reductions
    on it, so a kernel with torch shares tensors as before and one without never imports torch."""
    import multiprocessing as mp

    from .warm.pool import warm_pool

    pool = warm_pool() if method == "forkserver" else None
    context = pool.ensure_server() if pool else mp.get_context(method)
    return LaunchPlan(context=context, pool=pool, start_method=method, **fields)


def build_config(config: Any, overrides: dict[str, Any]) -> LaunchConfig:
    """Explicit keyword arguments > the given config > the default config file > defaults."""
    base = resolve_config(config)
    return base.replace(**{k: v for k, v in overrides.items() if v is not None})


def count_processes(requested: int | None, config: LaunchConfig, say: Callable[[str], None]) -> int:
    """Processes per machine: the argument, else the config's total / machines, else GPUs or 2 CPUs."""
    if requested is not None:
        if isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
            raise ConfigError(
                f"num_processes={requested!r} must be a positive integer (processes on this machine)."
            )
        return requested
    if config.num_processes is not None:
        return config.num_processes // config.num_machines
    from ..system.hardware import detect, visible_gpu_count

    gpus = 0 if config.runs_on_cpu else visible_gpu_count(config.gpu_ids, detect())
    if gpus:
        which = f"GPUs {config.gpu_ids}" if config.gpu_ids and config.gpu_ids != "all" else "GPU"
        say(f"notebook_launch: num_processes not given; using {gpus} processes, one per {which}.")
        return gpus
    say("notebook_launch: num_processes not given and no GPU found; using 2 CPU processes.")
    return 2


def resolve_processes(
    num_processes: int | None,
    config: Any,
    start_method: str,
    say: Callable[[str], None],
    overrides: dict[str, Any],
    restarts: bool = False,
) -> tuple[LaunchConfig, int, str]:
    """(config, processes on this machine, start method) from the caller's arguments — the front half
    of every plan, shared by notebook_launch and the %%ranks group (restarts: notebook_launch's
    restarts.py applies max_restarts)."""
    cfg = build_config(config, overrides)
    reject_agent_only_settings(cfg, restarts=restarts)
    check_gpu_ids(cfg)
    nproc = count_processes(num_processes, cfg, say)
    cfg = respect_single_process(
        cfg,
        nproc,
        processes_given=num_processes is not None,
        type_given=overrides.get("distributed_type") is not None,
        say=say,
    )
    cfg = cfg.replace(num_processes=nproc * cfg.num_machines)
    method, note = choose_start_method(start_method)
    if note:
        say(note)
    return cfg, nproc, method


def check_gpu_ids(config: LaunchConfig) -> None:
    """gpu_ids must name GPUs this machine has (as the CLI checks), unless the run is on CPU."""
    if not config.gpu_ids or config.gpu_ids == "all" or config.runs_on_cpu:
        return
    ids = [i.strip() for i in str(config.gpu_ids).split(",")]
    if not all(i.isdigit() for i in ids):
        raise ConfigError(
            f"gpu_ids={config.gpu_ids!r} must be comma-separated GPU indices such as '0,1', or 'all'."
        )
    from ..system.hardware import detect

    count = detect().cuda_device_count
    missing = [i for i in ids if int(i) >= count]
    if missing:
        raise ConfigError(
            f"gpu_ids={config.gpu_ids!r} names GPU {missing[0]}, but this machine has {count} CUDA GPU(s); "
            f"list indices below {count}, or pass use_cpu=True to train on CPU."
        )


def respect_single_process(
    config: LaunchConfig, nproc: int, *, processes_given: bool, type_given: bool, say: Callable[[str], None]
) -> LaunchConfig:
    """distributed_type NO means one process: never turn it into data parallel behind the user's back.

    NO given here with several processes is an error. NO from a config file (which `config default`
    writes for one process) yields to a num_processes given here, with a note: the argument wins.
    """
    world = nproc * config.num_machines
    if config.distributed_type != "NO" or world == 1:
        return config
    if type_given or not processes_given:
        raise ConfigError(
            f"distributed_type='NO' runs a single process, but this launch has {world} processes. Pass "
            "num_processes=1, or a distributed_type that uses several processes (MULTI_GPU, MULTI_CPU, FSDP, "
            "DEEPSPEED), or leave distributed_type unset to detect it."
        )
    say(
        f"notebook_launch: num_processes={nproc} given here overrides the config's distributed_type NO (one "
        "process); the strategy is detected instead (DDP)."
    )
    data = config.to_dict()
    data["distributed_type"] = None
    return LaunchConfig.from_dict(data, source="arguments")


def reject_agent_only_settings(config: LaunchConfig, restarts: bool = False) -> None:
    """Settings notebook_launch cannot apply are an error naming the alternative, never ignored.

    rdzv_backend (static or c10d) and monitor_interval are honoured as they are: machine 0's launcher
    hosts the store and the other machines wait for it (any start order), and the supervisor reacts to
    a worker's pipe at once, so any polling interval is met. max_restarts is applied by this launch
    itself (launch/faults/restarts.py, restarts=True), on one machine.
    """
    if not config.max_restarts:
        return
    if not restarts:
        why = "this kind of launch does not restart failed workers"
    elif config.num_machines > 1:
        why = "notebook_launch restarts the workers of one machine only (a restart needs a new rendezvous)"
    else:
        return
    raise ConfigError(
        f"max_restarts={config.max_restarts!r} cannot be applied by notebook_launch: {why}. Set max_restarts=0 "
        "(the default) here, or run the script with `notebook-launcher launch`, whose torchrun agent applies it."
    )


def choose_start_method(requested: str) -> tuple[str, str | None]:
    """Return (method, note). Fork is used on Linux unless this process already initialised CUDA."""
    if requested not in START_METHODS:
        raise ConfigError(
            f"start_method={requested!r} is not valid; choose one of {', '.join(START_METHODS)}."
        )
    if requested in ("spawn", "forkserver"):
        return requested, None  # no fork of this process: its CUDA state does not matter
    from ..system.hardware import cuda_fork_hazard

    unsafe = cuda_fork_hazard()
    if unsafe is None and not sys.platform.startswith("linux"):
        unsafe = f"fork is not safe on {sys.platform}"
    if requested == "fork" and unsafe:
        raise ConfigError(
            f"start_method='fork' cannot be used: {unsafe}, and forked workers would crash when they touch the "
            "GPU. Use start_method='auto' (or 'spawn'): the function is then sent to fresh processes with "
            "cloudpickle, no kernel restart needed."
        )
    if requested == "fork":
        return requested, None
    if unsafe:
        return (
            "forkserver",
            f"notebook_launch: {unsafe}; starting workers from a warm process server instead of forking "
            "(function sent with cloudpickle; `release_warm_pool()` ends the server).",
        )
    return "fork", None


def rendezvous(
    config: LaunchConfig, num_machines: int, on_demand: bool = False, say: Callable[[str], None] | None = None
) -> tuple[str, int, Any]:
    """(master address, port, store) for this launch.

    The machine with rank 0 hosts torch's TCPStore in this process, bound before any worker starts
    (port 0 = the OS picks a free one), and every worker connects to it as a client, as torchrun's
    agent does (TORCHELASTIC_USE_AGENT_STORE). No window in which another program can take the
    port, and no stale store from an earlier launch: the store lives exactly as long as the launch.
    on_demand (one machine, whose ranks meet in a file: system/store.py): the port is bound now and
    the TCPStore hosted only when a rank's own init_process_group connects (the supervisor watches).
    The port follows the one rule of system/network.rendezvous_port (a busy one on one machine is
    replaced, said through `say`).
    """
    if num_machines > 1 and not config.main_process_ip:
        raise ConfigError(
            "A launch over several machines needs master_addr (main_process_ip): the address of the machine "
            "with node_rank 0, reachable from every machine."
        )
    # One machine: the store listens on loopback only (store.store_bind_address), so that is
    # where the workers find it, whatever main_process_ip a config file carries.
    addr = config.main_process_ip if num_machines > 1 else LOOPBACK
    port, note = rendezvous_port(config.main_process_port, num_machines, config.machine_rank)
    if note and say is not None:
        say(f"notebook_launch: {note}")
    if config.machine_rank != 0:
        return addr, port, None
    bind = store_bind_address(config.main_process_ip, num_machines)
    store = _host_store(bind, port, on_demand=on_demand and num_machines == 1)
    return addr, store.port, store


def machine_network(
    config: LaunchConfig, say: Callable[[str], None]
) -> tuple[dict[str, str], Callable[[Callable[[], bool]], None]]:
    """The workers' network-interface variables — loopback on one machine; over several machines the
    interface that reaches the main one (said in one line) — and the check that the main machine's
    port answers, run before any worker starts."""
    if config.num_machines > 1 and not config.main_process_ip:
        return {}, lambda should_stop: None  # (rendezvous() names a missing main_process_ip)
    addr = str(config.main_process_ip)
    port = config.main_process_port if config.main_process_port is not None else DEFAULT_PORT
    env, note = workers_interface_env(config.num_machines, addr, port)
    if note is None:  # one machine: gloo on loopback, nothing to wait for
        return env, lambda should_stop: None
    say(f"notebook_launch: {note}")

    def reach_main(should_stop: Callable[[], bool]) -> None:
        if not wait_for_main(
            addr, port, say=lambda line: say(f"notebook_launch: {line}"), should_stop=should_stop
        ):
            raise LaunchStopped("The launch was stopped while waiting for the main machine.")

    return env, reach_main


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
    config: LaunchConfig,
    nproc: int,
    master: tuple[str, int],
    payload: bytes | None,
    extra_env: dict[str, str] | None = None,
) -> list[WorkerSpec]:
    """One WorkerSpec per local rank, each with the full env contract."""
    from ..system.hardware import ranks_run_on_cpu, threads_per_rank

    world = nproc * config.num_machines
    cpu_world = ranks_run_on_cpu(config.runs_on_cpu)
    # The workers join the store this launcher hosts, as torchrun's workers join their agent's. torch
    # 2.4 (checked; 2.6 no longer) builds the store's key prefix from TORCHELASTIC_RESTART_COUNT and
    # fails without it (KeyError); a launch starts as attempt 0 (launch/faults/restarts.py counts up).
    extra_env = {
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "TORCHELASTIC_RESTART_COUNT": "0",
        **(extra_env or {}),
    }
    if config.debug:
        extra_env.setdefault("ACCELERATE_DEBUG_MODE", "true")  # Accelerate's debug: collectives check shapes
    threads = threads_per_rank(nproc)  # applied with torch.set_num_threads in the worker (entry.py)
    specs = []
    for local_rank in range(nproc):
        rank = config.machine_rank * nproc + local_rank
        env = worker_env(
            rank=rank,
            local_rank=local_rank,
            world_size=world,
            local_world_size=nproc,
            group_rank=config.machine_rank,
            master_addr=master[0],
            master_port=master[1],
            config=config,
            cpu_world=cpu_world,
        )
        if threads is not None:
            env["OMP_NUM_THREADS"] = str(threads)
        if config.gpu_ids and config.gpu_ids != "all":
            env["CUDA_VISIBLE_DEVICES"] = config.gpu_ids
        env.update(extra_env)
        specs.append(WorkerSpec(rank=rank, env=env, payload=payload, threads=threads))
    return specs
