"""notebook_launch() and start_launch(): run a notebook-defined function on N processes and get
everything back — blocking, or in the background with a RunHandle.

Fork is used when safe (fast, and functions defined in cells just work); when the kernel already
holds CUDA, spawn with the function cloudpickled by value. The kernel is left exactly as it was.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

from ..cluster_runner import cluster_runner
from ..errors import ConfigError
from ..resolution import LaunchRequest, layered_config, resolve_launch
from ..view_factory import displayed_view
from . import planning
from .cell.output import CellPrinter, check_prefix_template
from .faults.restarts import RestartingRun, check_restart_on
from .handle import RunHandle, collect_result
from .planning import LaunchPlan
from .result import LaunchResult
from .supervise.payload import pickle_target
from .supervise.supervisor import Watch
from .warm.warmup import warm_up


def _prepare(
    fn: Callable[..., Any],
    args: Sequence[Any],
    kwargs: dict[str, Any] | None,
    *,
    request: LaunchRequest,
    timeout: float | None,
    say: Callable[[str], None],
) -> LaunchPlan:
    """The plan of a resolved launch: the function shipped (fork: handed over; else pickled), the
    store hosted, each worker's env."""
    kwargs = dict(kwargs or {})
    payload = None
    target: tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]] | None = (fn, tuple(args), kwargs)
    if request.start_method != "fork":
        payload = pickle_target(fn, tuple(args), kwargs, say)
        target = None
    else:
        warm_up(request.config)
    addr, port, store = planning.rendezvous(request, on_demand=True)
    specs = planning.make_specs(request, (addr, port), payload)
    return planning.plan_started_by(
        request,
        specs=specs,
        target=target,
        timeout=timeout,
        store=store,
        preflight=planning.main_machine_check(request, say),
    )


def layer_call(options: dict[str, Any], config_overrides: dict[str, Any]) -> None:
    """The call's config, layered once (arguments > config= > the default file > defaults) into
    options["config"]: whether the run goes to a cluster and how it is resolved both read it."""
    if "stall_timeout" in config_overrides and config_overrides["stall_timeout"] is None:
        config_overrides = dict(config_overrides, stall_timeout=0)  # None here means off, not "unset"
    overrides = dict(
        mixed_precision=options["mixed_precision"],
        num_machines=options["num_nodes"],
        machine_rank=options["node_rank"],
        main_process_ip=options["master_addr"],
        main_process_port=options["master_port"],
        **config_overrides,
    )
    options["config"] = layered_config(options["config"], overrides)


def resolve_call(
    options: dict[str, Any], config_overrides: dict[str, Any], say: Callable[[str], None]
) -> LaunchRequest:
    """notebook_launch's arguments resolved (resolution/): the one decision every later stage reads."""
    request = resolve_launch(
        options["config"],
        "notebook",
        num_processes=options["num_processes"],
        type_given=config_overrides.get("distributed_type") is not None,
        start_method=options["start_method"],
    )
    for note in request.notes:
        say(f"notebook_launch: {note}")
    return request


def _plan_and_watchers(
    fn: Callable[..., Any],
    args: Sequence[Any],
    kwargs: dict[str, Any] | None,
    options: dict[str, Any],
    config_overrides: dict[str, Any],
) -> tuple[LaunchPlan, list[Any]]:
    """The shared front half of notebook_launch and start_launch: resolve, plan, pick observers."""
    planning.check_call(fn, args, options["timeout"])
    say = (lambda _msg: None) if options["quiet"] else print
    request = resolve_call(options, config_overrides, say)
    plan = _prepare(fn, args, kwargs, request=request, timeout=options["timeout"], say=say)
    return plan, _watchers(options)


def _watchers(options: dict[str, Any]) -> list[Any]:
    """The cell printer (unless quiet) before the caller's observers; with a RunView shown instead
    of the lines, the ranks' display() outputs still go to the cell (the view has no place for them)."""
    observers = list(options["observers"])
    if not options["quiet"]:
        return [CellPrinter(options["show_ranks"], template=options["log_line_prefix_template"]), *observers]
    if options.get("view"):
        return [CellPrinter(options["show_ranks"], only_displays=True), *observers]
    return observers


def notebook_launch(
    fn: Callable[..., Any],
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    *,
    num_processes: int | None = None,
    mixed_precision: str | None = None,
    config: Any = None,
    start_method: str = "auto",
    timeout: float | None = None,
    num_nodes: int | None = None,
    node_rank: int | None = None,
    master_addr: str | None = None,
    master_port: int | None = None,
    show_ranks: int | Iterable[int] | None = None,
    quiet: bool = False,
    view: Any = False,
    observers: Sequence[Callable[[Any], None]] = (),
    poll_hooks: Sequence[Callable[[], Any]] = (),
    in_process: bool = False,
    cluster: Any = None,
    restart_on: str = "infrastructure",
    log_line_prefix_template: str | None = None,
    **config_overrides: Any,
) -> LaunchResult:
    """Run `fn(*args, **kwargs)` on `num_processes` worker processes of this machine and return every
    rank's value.

    Each worker gets RANK/WORLD_SIZE/... and the launch config, so `Accelerator()` inside `fn` picks
    up mixed precision, strategy and accumulation. Output streams into the cell as `[rankN] ...`.
    Raises WorkerError (first failing rank, its traceback), LaunchTimeout, or KeyboardInterrupt;
    in every case no worker is left running.

    num_processes counts processes on this machine (as in Accelerate's notebook_launcher); with
    num_nodes=M the world has num_processes * M ranks. Other keyword arguments are LaunchConfig
    fields (gradient_accumulation_steps, distributed_type, seed, fsdp_config, ...).

    stall_timeout=S (default 300; None or 0: off): when no rank makes progress for S seconds, a hang
    report (each rank's stack, the collective it is in, a verdict) is shown and the run goes on;
    timeout=T stops the run with the same report (docs/hang-report.md) T seconds after the workers
    started; preparing a first launch (importing torch into this process) comes before that clock.

    view=True shows a live RunView (per-rank output, progress, metrics chart, Stop button) instead of
    printing lines; pass a RunView instance to reuse one. log_line_prefix_template (torchrun's: fields
    {role_name}, {rank}, {local_rank}) replaces the `[rankN] ` prefix of printed lines. observers are called with every launch
    event; poll_hooks are called while the cell waits (one returning True stops the run).

    in_process=True (with num_processes=1) runs fn right here, as rank 0 of a world of one: the
    original exception propagates, so `%debug` lands in your frame.

    cluster="ray" / "slurm" (or RayCluster(...) / SlurmCluster(...); default: the config's
    cluster_config) runs the ranks there instead: num_processes ranks on each of num_nodes nodes,
    with the same result, output and errors (docs/clusters.md).

    max_restarts=N starts the ranks again (fresh rendezvous, accelerator.restart_count = attempt) after
    an infrastructure fault (a rank killed, exited without an exception, lost its peers, timed out in
    a collective) or a preemption, up to N times; restart_on="any" also after a Python exception. The
    function resumes itself with load_state() (README: Long runs). Accelerate's notebook_launcher()
    passes restart_on="any" with its max_restarts: torch elastic restarts after any failure. SIGTERM / SIGUSR1 to the launcher
    or a worker stop every rank after the same step (accelerator.preempted): LaunchPreempted.
    """
    check_restart_on(restart_on)
    check_prefix_template(log_line_prefix_template)
    options = dict(locals())
    __tracebackhide__ = True  # IPython: the launcher's frames say nothing about the user's error
    if in_process and cluster is None:
        _reject_for_in_process(options)
        return _launch_in_process(fn, args, kwargs, num_processes, config, mixed_precision, config_overrides)
    shown = displayed_view(view)
    if shown:
        options["observers"] = [*observers, shown]
        poll_hooks = [*poll_hooks, shown.poll]
        options["quiet"] = True
    layer_call(options, config_overrides)
    remote = _cluster_run(fn, args, kwargs, options, config_overrides, poll_hooks)
    if remote is not None:
        return cast(LaunchResult, remote.run())
    plan, watchers = _plan_and_watchers(fn, args, kwargs, options, config_overrides)
    run = RestartingRun(plan, Watch(watchers, poll_hooks), restart_on=restart_on)
    run.run()
    result = collect_result(run)
    if not options["quiet"] and result.performance.worth_saying:
        print(f"notebook_launch: {result.performance.verdict} (result.performance has each rank's steps)")
    return result


# Options that need worker processes, with the value that means "not asked for" and why in_process
# cannot apply another one: an error, never silently ignored.
_NOT_IN_PROCESS = {
    "timeout": ((None,), "a function running in the kernel's own thread cannot be stopped from outside"),
    "start_method": (("auto",), "nothing is started"),
    "num_nodes": ((None, 1), "one process is one machine"),
    "node_rank": ((None, 0), "one process is one machine"),
    "master_addr": ((None,), "there is no rendezvous"),
    "master_port": ((None,), "there is no rendezvous"),
    "show_ranks": ((None, 0), "output goes straight to the cell"),
    "quiet": ((False,), "output goes straight to the cell"),
    "view": ((False, None), "there are no workers to show"),
    "observers": (((),), "no launch events are sent"),
    "poll_hooks": (((),), "the cell is busy running the function"),
    "restart_on": (("infrastructure",), "nothing is restarted"),
    "log_line_prefix_template": ((None,), "output goes straight to the cell"),
}


def _reject_for_in_process(options: dict[str, Any]) -> None:
    stall = options["config_overrides"].get("stall_timeout")
    if stall:
        raise ConfigError(
            f"in_process=True runs fn in this process, so stall_timeout={stall!r} cannot be applied (no other "
            "process watches it for a hang). Drop stall_timeout, or drop in_process=True to run in a worker process."
        )
    for name, (allowed, why) in _NOT_IN_PROCESS.items():
        value = options[name]
        if isinstance(value, (list, tuple)) and not value:
            continue  # no observers / hooks given
        if value not in allowed:
            raise ConfigError(
                f"in_process=True runs fn in this process, so {name}={value!r} cannot be applied ({why}). "
                f"Drop {name}, or drop in_process=True to run in a worker process."
            )


def _cluster_run(
    fn: Callable[..., Any],
    args: Sequence[Any],
    kwargs: dict[str, Any] | None,
    options: dict[str, Any],
    config_overrides: dict[str, Any],
    poll_hooks: Sequence[Callable[[], Any]],
) -> Any:
    """The launch on a cluster that cluster= (or the config's cluster_config) asks for; None for
    this machine. The runner the public face registered (cluster_runner.py) takes it: the launcher
    never imports clusters/ (the arrow is clusters -> launch). options["config"] is the call's
    layered config (layer_call)."""
    if options.get("cluster") is None and options["config"].cluster_config.cluster_type == "local":
        return None
    overrides = dict(mixed_precision=options["mixed_precision"], **config_overrides)
    return cluster_runner()(fn, args, kwargs, options, overrides, _watchers(options), poll_hooks)


def _launch_in_process(
    fn: Callable[..., Any],
    args: Sequence[Any],
    kwargs: dict[str, Any] | None,
    num_processes: int | None,
    config: Any,
    mixed_precision: str | None,
    overrides: dict[str, Any],
) -> LaunchResult:
    from .in_process import run_in_process

    if num_processes not in (None, 1):
        raise ConfigError(
            f"in_process=True runs one rank in this process; num_processes={num_processes!r} must be 1 or unset."
        )
    if not callable(fn):
        raise ConfigError(f"notebook_launch needs a function to run; got {type(fn).__name__} {fn!r}.")
    request = resolve_launch(
        layered_config(config, dict(mixed_precision=mixed_precision, **overrides)),
        "in_process",
        num_processes=1,
        type_given=overrides.get("distributed_type") is not None,
    )
    for note in request.notes:
        print(f"notebook_launch: {note}")
    return run_in_process(fn, tuple(args), dict(kwargs or {}), request.config)


def start_launch(
    fn: Callable[..., Any], args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None, **options: Any
) -> RunHandle:
    """Like notebook_launch, but returns at once with a RunHandle (wait(), stop(), done, result).

    It takes notebook_launch's keyword options except in_process (its signature says so: one list
    of options for both). view=True shows a live RunView whose Stop button stops this run; pass a
    RunView to reuse one.
    """
    bound = _START_LAUNCH.bind(fn, args, kwargs, **options)
    bound.apply_defaults()
    options = dict(bound.arguments)
    observers, poll_hooks, restart_on = options["observers"], options["poll_hooks"], options["restart_on"]
    config_overrides = options["config_overrides"]
    check_restart_on(restart_on)
    check_prefix_template(options["log_line_prefix_template"])
    shown = displayed_view(options["view"])
    if shown:
        options["observers"] = [*observers, shown]
        options["quiet"] = True
    layer_call(options, config_overrides)
    remote = _cluster_run(fn, args, kwargs, options, config_overrides, poll_hooks)
    if remote is not None:
        handle = RunHandle(None, (), (), runner=remote.run)
    else:
        plan, watchers = _plan_and_watchers(fn, args, kwargs, options, config_overrides)
        handle = RunHandle(plan, watchers, poll_hooks, restart_on=restart_on)
    if shown:
        shown.attach(handle)
    return handle


def _start_launch_signature() -> inspect.Signature:
    """notebook_launch's signature less in_process, returning a RunHandle: what start_launch takes."""
    signature = inspect.signature(notebook_launch)
    kept = [p for name, p in signature.parameters.items() if name != "in_process"]
    return signature.replace(parameters=kept, return_annotation="RunHandle")


_START_LAUNCH = _start_launch_signature()
start_launch.__signature__ = _START_LAUNCH  # type: ignore[attr-defined]
