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
from ..network import port_is_free, socket_interface_env, wait_for_main
from .result import LaunchStopped
from .worker import WorkerSpec


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


START_METHODS = ("auto", "fork", "spawn", "forkserver")
DEFAULT_PORT = 29500


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
    from ..hardware import detect

    gpus = 0 if config.use_cpu else detect().cuda_device_count
    if gpus:
        say(f"notebook_launch: num_processes not given; using {gpus} processes, one per GPU.")
        return gpus
    say("notebook_launch: num_processes not given and no GPU found; using 2 CPU processes.")
    return 2


def choose_start_method(requested: str) -> tuple[str, str | None]:
    """Return (method, note). Fork is used on Linux unless this process already initialised CUDA."""
    if requested not in START_METHODS:
        raise ConfigError(
            f"start_method={requested!r} is not valid; choose one of {', '.join(START_METHODS)}."
        )
    from ..hardware import cuda_initialized

    unsafe = None
    if cuda_initialized():
        unsafe = "this kernel has already initialised CUDA"
    elif not sys.platform.startswith("linux"):
        unsafe = f"fork is not safe on {sys.platform}"
    if requested == "fork" and unsafe:
        raise ConfigError(
            f"start_method='fork' cannot be used: {unsafe}, and forked workers would crash when they touch the "
            "GPU. Use start_method='auto' (or 'spawn'): the function is then sent to fresh processes with "
            "cloudpickle, no kernel restart needed."
        )
    if requested != "auto":
        return requested, None
    if unsafe:
        return (
            "spawn",
            f"notebook_launch: {unsafe}; starting workers with spawn (function sent with cloudpickle).",
        )
    return "fork", None


def check_port_free(port: int) -> None:
    """Fail early, with the fix, when the rendezvous port is taken (instead of a hang or a torch trace)."""
    if not port_is_free(port):
        raise ConfigError(
            f"master_port={port} is already in use on this machine (or cannot be opened). Pass another "
            "master_port, or leave it unset on a single machine to get a free one."
        )


def rendezvous(config: LaunchConfig, num_machines: int) -> tuple[str, int, Any]:
    """(master address, port, store) for this launch.

    The machine with rank 0 hosts torch's TCPStore in this process, bound before any worker starts
    (port 0 = the OS picks a free one), and every worker connects to it as a client, as torchrun's
    agent does (TORCHELASTIC_USE_AGENT_STORE). No window in which another program can take the
    port, and no stale store from an earlier launch: the store lives exactly as long as the launch.
    """
    if num_machines > 1 and not config.main_process_ip:
        raise ConfigError(
            "A launch over several machines needs master_addr (main_process_ip): the address of the machine "
            "with node_rank 0, reachable from every machine."
        )
    addr = config.main_process_ip or "127.0.0.1"
    port = (
        config.main_process_port
        if config.main_process_port is not None
        else (DEFAULT_PORT if num_machines > 1 else 0)
    )
    if config.machine_rank != 0:
        return addr, port, None
    if port:
        check_port_free(port)
    store = _host_store(port)
    return addr, store.port, store


def machine_network(
    config: LaunchConfig, say: Callable[[str], None]
) -> tuple[dict[str, str], Callable[[Callable[[], bool]], None]]:
    """For a launch over several machines: the workers' network-interface variables (said in one
    line) and the check that the main machine's port answers, run before any worker starts."""
    if config.num_machines == 1 or not config.main_process_ip:
        return {}, lambda should_stop: None  # (rendezvous() names a missing main_process_ip)
    addr = str(config.main_process_ip)
    port = config.main_process_port if config.main_process_port is not None else DEFAULT_PORT
    env, note = socket_interface_env(addr, port)
    say(f"notebook_launch: {note}")

    def reach_main(should_stop: Callable[[], bool]) -> None:
        if not wait_for_main(
            addr, port, say=lambda line: say(f"notebook_launch: {line}"), should_stop=should_stop
        ):
            raise LaunchStopped("The launch was stopped while waiting for the main machine.")

    return env, reach_main


def _host_store(port: int) -> Any:
    import datetime

    from torch.distributed import TCPStore

    try:
        return TCPStore(
            "0.0.0.0", port, is_master=True, wait_for_workers=False, timeout=datetime.timedelta(minutes=30)
        )
    except RuntimeError as exc:  # DistNetworkError subclasses RuntimeError
        raise ConfigError(
            f"Could not open the rendezvous port {port}: {exc}. Pass another master_port."
        ) from None


def _threads_per_worker(user_value: str | None, cores: int, nproc: int) -> int | None:
    """The user's OMP_NUM_THREADS, else the cores shared out. The worker applies it with
    torch.set_num_threads: a forked worker keeps the kernel's thread pool, which the variable alone
    no longer changes (with OMP_NUM_THREADS=1 set in the notebook, workers still ran 2 threads)."""
    if user_value is None:
        return max(1, cores // nproc)
    try:
        return max(1, int(user_value))
    except ValueError:
        return None  # not a number: leave it to OpenMP, as the user wrote it


def make_specs(
    config: LaunchConfig,
    nproc: int,
    master: tuple[str, int],
    payload: bytes | None,
    extra_env: dict[str, str] | None = None,
) -> list[WorkerSpec]:
    """One WorkerSpec per local rank, each with the full env contract."""
    import os

    from ..hardware import cpu_count

    world = nproc * config.num_machines
    extra_env = {"TORCHELASTIC_USE_AGENT_STORE": "True", **(extra_env or {})}
    threads = _threads_per_worker(os.environ.get("OMP_NUM_THREADS"), cpu_count(), nproc)
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
        )
        if threads is not None:
            env["OMP_NUM_THREADS"] = str(threads)
        if config.gpu_ids and config.gpu_ids != "all":
            env["CUDA_VISIBLE_DEVICES"] = config.gpu_ids
        env.update(extra_env)
        specs.append(WorkerSpec(rank=rank, env=env, payload=payload, threads=threads))
    return specs


def pickle_target(fn: Any, args: tuple, kwargs: dict) -> bytes:
    """cloudpickle (fn, args, kwargs) by value; name the object that cannot be pickled."""
    import cloudpickle

    try:
        return cloudpickle.dumps((fn, args, kwargs))
    except Exception as exc:
        culprit = _find_unpicklable({"fn": fn, **{f"args[{i}]": a for i, a in enumerate(args)}, **kwargs})
        where = f" The problem is {culprit}." if culprit else ""
        raise ConfigError(
            f"The function and its arguments must be picklable to start workers with spawn: {exc}.{where} "
            "Create such objects (open files, locks, CUDA tensors, database connections) inside the function."
        ) from exc


def _find_unpicklable(items: dict[str, Any]) -> str | None:
    import cloudpickle

    for name, value in items.items():
        try:
            cloudpickle.dumps(value)
        except Exception as exc:
            inner = _unpicklable_capture(value) if callable(value) else None
            return inner or f"{name} ({type(value).__name__}: {exc})"
    return None


def _unpicklable_capture(fn: Any) -> str | None:
    """For a function that will not pickle: the global or closure variable it uses that will not."""
    import cloudpickle

    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    names = {name: fn.__globals__[name] for name in code.co_names if name in getattr(fn, "__globals__", {})}
    cells = zip(code.co_freevars, fn.__closure__ or (), strict=False)
    names.update({name: cell.cell_contents for name, cell in cells})
    for name, value in names.items():
        try:
            cloudpickle.dumps(value)
        except Exception as exc:
            return f"the variable {name!r} that {getattr(fn, '__name__', 'the function')} uses ({type(value).__name__}: {exc})"
    return None
