"""Running a resolved launch through torch.distributed.run (torchrun) and reporting how it ended.

We call torchrun in this process — `torch.distributed.run.run(parse_args([...]))`, its documented
programmatic entry — rather than starting `python -m torch.distributed.run` as a subprocess:
  * the elastic agent (rendezvous, worker start, health monitoring, restarts, teardown of every
    worker on failure or signal) is torch's, unchanged; we add no process management of our own;
  * a failed run comes back as elastic's ChildFailedError with each failed rank, exit code and
    error file, so we can name the failing rank and show its traceback instead of scraping output;
  * no second interpreter to start and no signals to forward through an extra process layer.
The launcher's environment changes (the env contract, OMP_NUM_THREADS, ...) are made only for the
duration of the run, because torchrun's workers inherit this process's environment.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, cast

from ..config import LaunchConfig, config_to_env, patched_environ, to_file_dict
from ..errors import ConfigError, NetworkError
from ..estimate.performance import PerformanceReport
from ..records.names import (
    ALL_INTERFACES,
    CONFIG_ENV,
    GRACEFUL_PREEMPTION_ENV,
    LAUNCHER_PID_ENV,
    REPORT_ENV,
    RUN_DIR_ENV,
)
from ..resolution import LaunchRequest
from ..system.network import (
    LOOPBACK,
    wait_for_main,
)
from ..system.private_files import make_private_dir
from ..system.store import host_store
from .machines import MachinesMissing, bounded_exit_installed

BOOTSTRAP = "notebook_launcher.cli.bootstrap"
RANK_PREFIX_TEMPLATE = "[rank${rank}] "  # as notebook_launch prints; torchrun fills in the global rank
PREFIX_TEMPLATE_ENV = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"
# The signals torchrun's agent (in this process) turns into a shutdown that passes the same signal to
# every worker: torch's four, and SIGUSR1 (SLURM's warning before a time limit), which would otherwise
# end this process at once and its workers with it, unsaved. A worker whose Accelerator listens
# (GRACEFUL_PREEMPTION_ENV) finishes its step, agrees with the others, and can save before it exits.
HANDLED_SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1"  # torchrun's --signals-to-handle (torch >= 2.8)
PREEMPTION_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
RDZV_ID = "notebook_launcher"
DETAIL_CRASH_HINT = (
    "Hint: TORCH_DISTRIBUTED_DEBUG=DETAIL (set by --debug) makes DistributedDataParallel crash with SIGSEGV on "
    "some torch builds (seen with torch 2.13 on CPU/gloo). Keep --debug but run with TORCH_DISTRIBUTED_DEBUG=INFO "
    "set in your shell."
)


@dataclass
class RunPlan:
    """Everything torchrun is called with, decided before anything starts."""

    config: LaunchConfig
    target: list[str]  # ["script", path, *args] or ["module", name, *args]
    torchrun_args: list[str]
    env: dict[str, str]
    notes: list[str] = field(default_factory=list)
    wait_for_main: bool = False  # a machine other than 0: check the main machine's port first
    log_dir: str | None = None  # the user's --log_dir; None: a temporary one, removed after the run
    report_performance: bool = False  # --report_performance: the step breakdown and verdict at the end
    store_bind: str = LOOPBACK  # where machine 0's store listens (resolution/)
    rendezvous_env: dict[str, str] = field(default_factory=dict)  # one machine: the ranks meet in a file

    @property
    def local_processes(self) -> int:
        return int(cast(int, self.config.num_processes)) // self.config.num_machines  # set by resolution/


def build_plan(
    request: LaunchRequest,
    target: list[str],
    *,
    tee: str | None = None,
    log_dir: str | None = None,
    rank_prefix: bool = True,
    report_performance: bool = False,
) -> RunPlan:
    """torchrun's arguments and the workers' env for a resolved launch (resolution/: port, threads,
    devices are the request's).

    Every line a worker prints is prefixed with its rank (`[rank1] ...`, as in notebook_launch):
    torchrun's --tee copies each worker's output to the console with the prefix template. On one
    machine the rendezvous is static and on loopback (see _rendezvous_args).
    """
    notes: list[str] = []
    config = request.config
    args = [
        f"--nnodes={config.num_machines}",
        f"--nproc_per_node={request.local_processes}",
        *_rendezvous_args(config, notes),
    ]
    args += [f"--max_restarts={config.max_restarts}", f"--monitor_interval={config.monitor_interval}"]
    env = dict(config_to_env(config, cpu_world=request.cpu_world))
    if rank_prefix and tee is None:
        tee = "3"
    if rank_prefix and tee not in (None, "0"):
        env[PREFIX_TEMPLATE_ENV] = RANK_PREFIX_TEMPLATE
    if tee is not None:
        args.append(f"--tee={tee}")
    if log_dir is not None:
        args.append(f"--log_dir={log_dir}")
    args += ["--module", BOOTSTRAP, *target]

    env[GRACEFUL_PREEMPTION_ENV] = "1"
    if request.threads_per_rank is not None:
        env["OMP_NUM_THREADS"] = str(request.threads_per_rank)
    if config.debug:
        env["ACCELERATE_DEBUG_MODE"] = "true"  # Accelerate's debug: collectives check shapes across ranks
    if config.debug and not os.environ.get("TORCH_DISTRIBUTED_DEBUG"):
        env["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"  # a level the user set themselves wins
    if request.visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = request.visible_devices
    env.update(request.network_env)  # one machine: gloo on loopback, where the store is (no hostname lookup)
    return RunPlan(
        config=config,
        target=target,
        torchrun_args=args,
        env=env,
        notes=notes,
        wait_for_main=config.num_machines > 1 and config.machine_rank != 0,
        log_dir=log_dir,
        report_performance=report_performance,
        store_bind=request.store_bind,
        rendezvous_env=dict(request.rendezvous_env),
    )


def _rendezvous_args(config: LaunchConfig, notes: list[str]) -> list[str]:
    """torchrun's rendezvous flags. One machine: static on 127.0.0.1, whatever the config says,
    because the store then listens on loopback only (c10d's agent would open a second store on
    every interface, and nothing is gained from c10d on one machine)."""
    if config.num_machines == 1:
        if config.rdzv_backend != "static":
            notes.append(
                f"rdzv_backend={config.rdzv_backend} is for several machines; on one machine the rendezvous is "
                "static, on 127.0.0.1 only."
            )
        return ["--rdzv_backend=static", "--node_rank=0", f"--master_addr={LOOPBACK}",
                f"--master_port={config.main_process_port}"]  # fmt: skip
    if config.rdzv_backend == "static":
        return [
            "--rdzv_backend=static",
            f"--node_rank={config.machine_rank}",
            f"--master_addr={config.main_process_ip}",
            f"--master_port={config.main_process_port}",
        ]
    is_host = "true" if config.machine_rank == 0 else "false"
    endpoint = f"{config.main_process_ip}:{config.main_process_port}"
    return [
        f"--rdzv_backend={config.rdzv_backend}",
        f"--rdzv_endpoint={endpoint}",
        f"--rdzv_id={RDZV_ID}",
        f"--rdzv_conf=is_host={is_host}",
    ]


def describe_plan(plan: RunPlan, source: str) -> str:
    """What --debug prints: the resolved config, the rendezvous, and the equivalent torchrun command."""
    import yaml

    config = plan.config
    lines = [f"resolved config (flags > {source} > detected defaults):"]
    lines += ["  " + line for line in yaml.safe_dump(to_file_dict(config), sort_keys=False).splitlines()]
    backend, host = (
        (config.rdzv_backend, config.main_process_ip) if config.num_machines > 1 else ("static", LOOPBACK)
    )
    lines.append(
        f"rendezvous: backend={backend} endpoint={host}:{config.main_process_port} "
        f"machines={config.num_machines} machine_rank={config.machine_rank} "
        f"processes_per_machine={plan.local_processes} world_size={config.num_processes}"
    )
    lines.append("torchrun " + " ".join(plan.torchrun_args))
    shown = {k: v for k, v in plan.env.items() if k != CONFIG_ENV}
    lines.append("worker environment: " + " ".join(f"{k}={v}" for k, v in sorted(shown.items())))
    return "\n".join(lines)


def _quiet_elastic_logs(level: int) -> None:
    """torchrun logs every failure and SIGTERM it sends; we report failures ourselves."""
    for name in list(logging.Logger.manager.loggerDict):
        if name.startswith(
            ("torch.distributed.elastic", "torch.distributed.run", "torch.distributed.launcher")
        ):
            logging.getLogger(name).setLevel(level)


def execute(plan: RunPlan, *, debug: bool = False, err: Any = None) -> int:
    """Run the plan through torchrun; 0 on success, 1 when a rank failed, 128+N on signal N.

    The run gets a private directory (system/private_files.py) that the workers find through
    RUN_DIR_ENV, removed afterwards. Without --log_dir, torchrun's logs and error files go there too
    (torchrun's own default, a new /tmp/torchelastic_* folder per run, is never removed).
    """
    err = err or sys.stderr
    run_dir = make_private_dir()
    args = plan.torchrun_args
    if plan.log_dir is None:
        at = args.index("--module")
        args = [*args[:at], f"--log_dir={os.path.join(run_dir, 'logs')}", *args[at:]]
    store = hosted_store(plan)
    figures = os.path.join(run_dir, "steps") if plan.report_performance else None
    if figures is not None:  # in the private run directory: where each rank leaves its step figures
        os.mkdir(figures, 0o700)
        plan = replace(plan, env={**plan.env, REPORT_ENV: figures})
    try:
        return _run_torchrun(plan, args, debug, err, {RUN_DIR_ENV: run_dir, **plan.rendezvous_env})
    finally:
        store = None  # noqa: F841 - closes the rendezvous port
        if figures is not None:
            print(f"notebook-launcher: {PerformanceReport.from_folder(figures)}", file=err, flush=True)
        shutil.rmtree(run_dir, ignore_errors=True)


def hosted_store(plan: RunPlan) -> Any:
    """On machine 0, torch's rendezvous store listening where store.store_bind_address says.

    torchrun's agent then creates its store on the same port with multi_tenant=True, which shares
    this server instead of opening one on every interface (TCPStore's own choice). None where
    this machine hosts nothing, or all interfaces is what is needed anyway.
    """
    config, bind = plan.config, plan.store_bind
    if config.machine_rank != 0 or bind == ALL_INTERFACES:
        return None
    try:
        port = int(cast(int, config.main_process_port))  # set by resolve.py
        return host_store(bind, port, timeout_s=15 * 60, multi_tenant=True)
    except (OSError, RuntimeError) as exc:
        raise ConfigError(
            f"the rendezvous store cannot listen on {bind}:{config.main_process_port} ({exc}); pass another "
            "--main_process_port."
        ) from None


def _run_torchrun(plan: RunPlan, args: list[str], debug: bool, err: Any, extra_env: dict[str, str]) -> int:
    from torch.distributed import run as torchrun
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    _quiet_elastic_logs(logging.INFO if debug else logging.CRITICAL)
    if plan.wait_for_main:
        try:
            wait_for_main(
                str(plan.config.main_process_ip),
                int(cast(int, plan.config.main_process_port)),
                say=lambda line: print(f"notebook-launcher: {line}", file=err, flush=True),
            )
        except NetworkError as exc:
            print(f"notebook-launcher: {exc}", file=err)
            return 1
    args = _with_handled_signals(torchrun.get_args_parser(), args)
    # Each worker arms a death signal for its parent, this process (cli/bootstrap.py).
    with (
        patched_environ({**plan.env, **extra_env, LAUNCHER_PID_ENV: str(os.getpid())}),
        bounded_exit_installed(plan.config),
    ):
        try:
            torchrun.run(torchrun.parse_args(args))
        except MachinesMissing as exc:
            print(f"notebook-launcher: {exc}", file=err)
            return 1
        except ChildFailedError as exc:
            print(describe_failures(exc.failures), file=err)
            crashed = any(f.exitcode == -signal.SIGSEGV for f in exc.failures.values())
            if crashed and os.environ.get("TORCH_DISTRIBUTED_DEBUG", "").upper() == "DETAIL":
                print(DETAIL_CRASH_HINT, file=err)
            return 1
        except SignalException as exc:
            name = signal.Signals(exc.sigval).name
            if exc.sigval in PREEMPTION_SIGNALS:
                print(
                    f"notebook-launcher: preempted by {name}: every worker was passed {name}; those whose "
                    "Accelerator checks accelerator.preempted stopped after the same step (and could save), the "
                    "others ended at once.",
                    file=err,
                )
            else:
                print(f"notebook-launcher: stopped by {name}; workers were shut down.", file=err)
            return 128 + int(exc.sigval)
        except KeyboardInterrupt:
            print("notebook-launcher: interrupted; workers were shut down.", file=err)
            return 130
        except Exception as exc:  # rendezvous timeouts, unreachable store, ...
            if debug:
                raise
            print(
                f"notebook-launcher: the launch failed before the script could run: {type(exc).__name__}: {exc}\n"
                "Check that every machine uses the same --num_machines, --num_processes, --rdzv_backend, "
                "--main_process_ip and --main_process_port, and that machine 0 is reachable. "
                "Run again with --debug for details.",
                file=err,
            )
            return 1
    return 0


def _with_handled_signals(parser: Any, args: list[str]) -> list[str]:
    """torchrun's arguments with SIGUSR1 among the signals its agent handles, where this torch's
    torchrun has the option and the user did not choose the signals (torchrun-style args) themselves."""
    known = any("--signals-to-handle" in action.option_strings for action in parser._actions)
    chosen = any(arg.startswith(("--signals-to-handle", "--signals_to_handle")) for arg in args)
    if not known or chosen:
        return args
    at = args.index("--module")
    return [*args[:at], f"--signals-to-handle={HANDLED_SIGNALS}", *args[at:]]


# ------------------------------------------------------------------ failures


def _failure_time(failure: Any) -> float:
    info = failure.message.get("extraInfo", {}) if isinstance(failure.message, dict) else {}
    try:
        return int(info["time_ns"]) / 1e9
    except (KeyError, TypeError, ValueError):
        return float(failure.timestamp)


def root_cause(failures: Mapping[int, Any]) -> int:
    """The rank that failed first; ranks the agent stopped with SIGTERM only when nothing else failed."""

    def key(rank: int) -> tuple[bool, float, int]:
        failure = failures[rank]
        return (failure.exitcode == -signal.SIGTERM, _failure_time(failure), rank)

    return min(failures, key=key)


def _traceback_of(failure: Any) -> str | None:
    if isinstance(failure.message, dict):
        info = failure.message.get("extraInfo", {})
        return info.get("py_callstack") or failure.message.get("message")
    return None


def _how(failure: Any) -> str:
    if failure.exitcode < 0:
        name = failure.signal_name()
        hint = " (often the out-of-memory killer)" if failure.exitcode == -signal.SIGKILL else ""
        return f"was killed by signal {name}{hint}"
    return f"exited with code {failure.exitcode}"


def describe_failures(failures: Mapping[int, Any]) -> str:
    """The failing rank, how it ended and its traceback; then one line per other stopped rank."""
    first = root_cause(failures)
    failure = failures[first]
    lines = [
        f"notebook-launcher: rank {first} failed: it {_how(failure)} (local rank {failure.local_rank}, pid {failure.pid})."
    ]
    tb = _traceback_of(failure)
    if tb:
        lines.append(f"Traceback of rank {first}:")
        lines += ["  " + line for line in tb.rstrip().splitlines()]
    else:
        lines.append(
            f"No Python traceback was recorded for rank {first}; its output above shows what happened."
        )
    for rank in sorted(set(failures) - {first}):
        other = failures[rank]
        if other.exitcode == -signal.SIGTERM:
            lines.append(f"rank {rank} was stopped by the launcher after rank {first} failed.")
        else:
            summary = other.message.get("message") if isinstance(other.message, dict) else None
            lines.append(f"rank {rank} also failed: it {_how(other)}" + (f": {summary}" if summary else "."))
    return "\n".join(lines)
