"""Ranks: N processes with their process group up, kept alive so a notebook can talk to them cell
by cell (the %%ranks magic is a thin layer over this class).

    ranks = Ranks(2, mixed_precision="bf16")   # same arguments and config handling as notebook_launch
    ranks.run("model = build(); rank = Accelerator().process_index")   # in each rank's namespace
    ranks.run("loss = train_one_epoch(model)")
    ranks.pull("loss")                          # [rank 0's loss, rank 1's loss]
    ranks.push(lr=1e-3)                         # the same value into every rank's namespace
    ranks.stop()                                # or: with Ranks(2) as ranks: ...
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..errors import ConfigError
from ..launch import planning
from ..launch.cell.output import CellPrinter
from ..launch.planning import LaunchPlan
from ..launch.worker.channel import load_pickled
from ..resolution import layered_config, resolve_launch
from . import protocol
from .group import RankGroup, describe_exit
from .outcome import CellInterrupted, RankError, RanksBroken, RanksError, failure_from_reply

_cell_counter = 0


class Ranks:
    """A group of rank processes that keep their namespaces (and process group) between calls.

    Arguments are notebook_launch's: num_processes (default: one per GPU, else 2 CPU processes),
    mixed_precision, config (a LaunchConfig, dict, YAML/JSON path or a ConfigPanel's config),
    start_method, show_ranks, quiet, and LaunchConfig fields as keywords. The ranks start at once;
    `Accelerator()` inside them reads this config, as in a launch.
    """

    def __init__(
        self,
        num_processes: int | None = None,
        *,
        mixed_precision: str | None = None,
        config: Any = None,
        start_method: str = "auto",
        show_ranks: int | Iterable[int] | None = None,
        quiet: bool = False,
        **config_overrides: Any,
    ) -> None:
        self._options = dict(
            num_processes=num_processes,
            config=config,
            start_method=start_method,
            overrides=dict(mixed_precision=mixed_precision, **config_overrides),
        )
        self._show_ranks, self._quiet = show_ranks, quiet
        self._group: RankGroup | None = None
        self._finalizer: weakref.finalize | None = None
        self.start()

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Start the ranks (done by the constructor; again after stop())."""
        if self._group is not None:
            raise RanksError("The ranks are already running; stop() or restart() them first.")
        plan = plan_group(say=(lambda _m: None) if self._quiet else print, **self._options)
        observers = [] if self._quiet else [CellPrinter(self._show_ranks, logs_name=None)]
        group = RankGroup(plan, observers)
        group.start()
        self._group = group
        # Stops the ranks when this object is collected, and at interpreter exit (kernel shutdown).
        self._finalizer = weakref.finalize(self, group.stop)

    def stop(self) -> None:
        """End every rank: no process, pipe or port is left. Safe to call twice."""
        group, self._group = self._group, None
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if group is not None:
            group.stop()

    def restart(self) -> None:
        """Stop and start again with the same arguments (fresh namespaces, a new process group)."""
        self.stop()
        self.start()

    def __enter__(self) -> Ranks:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    # --------------------------------------------------------------- properties
    @property
    def running(self) -> bool:
        return self._group is not None

    @property
    def num_processes(self) -> int:
        return len(self._live().ranks)

    @property
    def config(self) -> Any:
        """The LaunchConfig every rank runs with."""
        return self._live().plan.config

    @property
    def start_method(self) -> str:
        return self._live().plan.start_method

    @property
    def metrics(self) -> list[dict[str, Any]]:
        """One row per accelerator.log() call in any rank, as in LaunchResult.metrics."""
        return self._live().record.metrics

    # ------------------------------------------------------------------- work
    def run(
        self, code_or_function: str | Callable[..., Any], *args: Any, ranks: Any = None, **kwargs: Any
    ) -> list:
        """Run code on the ranks and return each one's value, in rank order.

        A string runs in each rank's namespace (names it defines stay for later calls); its value is
        that of its last expression. A function is called with *args and **kwargs in each rank (sent
        with cloudpickle, like a spawned launch's function); its value is its return value.
        """
        chosen = self._chosen(ranks)
        if isinstance(code_or_function, str):
            payload = {"code": code_or_function, "filename": _cell_name(), "show": False, "want_value": True}
            replies = self._request(protocol.EXEC, payload, chosen)
        elif callable(code_or_function):
            from ..launch.worker.host_pickle import dumps_on_host

            blob = dumps_on_host((code_or_function, tuple(args), dict(kwargs)))
            replies = self._request(protocol.CALL, {"payload": blob}, chosen)
        else:
            raise TypeError(f"run() takes code (a str) or a function; got {type(code_or_function).__name__}.")
        return [load_pickled(replies[r]["value"]) for r in chosen]

    def run_cell(self, code: str, ranks: Any = None, filename: str | None = None) -> None:
        """What a %%ranks cell does: run `code` on the ranks, print each last expression's repr."""
        payload = {"code": code, "filename": filename or _cell_name(), "show": True, "want_value": False}
        self._request(protocol.EXEC, payload, self._chosen(ranks))

    def pull(self, name: str, ranks: Any = None) -> list:
        """`name` from each rank's namespace, in rank order (tensors arrive on the CPU)."""
        chosen = self._chosen(ranks)
        replies = self._request(protocol.PULL, {"name": name}, chosen)
        return [load_pickled(replies[r]["value"]) for r in chosen]

    def push(self, values: Mapping[str, Any] | None = None, /, *, ranks: Any = None, **named: Any) -> None:
        """Set names in each rank's namespace: push(lr=1e-3), or push({"ranks": obj}) for a name
        that is one of this method's keywords. GPU tensors travel on the CPU."""
        from ..launch.worker.host_pickle import dumps_on_host

        data = {**dict(values or {}), **named}
        bad = [k for k in data if not (isinstance(k, str) and k.isidentifier())]
        if bad:
            raise ConfigError(f"push() needs names that are Python identifiers; got {bad[0]!r}.")
        self._request(protocol.PUSH, {"values": dumps_on_host(data)}, self._chosen(ranks))

    def status(self) -> str:
        """One line per rank: state, pid, device; the group's config; a checkpoint being written in the
        background and the last complete one."""
        if self._group is None:
            return "ranks: stopped (start() or `%ranks start N`)"
        group = self._group
        group.catch_up()
        cfg = group.plan.config
        lines = [
            f"ranks: {len(group.ranks)} processes ({group.plan.start_method}), distributed_type="
            f"{cfg.distributed_type or 'auto'}, mixed_precision={cfg.mixed_precision}"
            + (f"; BROKEN: {group.broken}" if group.broken else "")
        ]
        for rank in group.ranks:
            state = rank.status if rank.alive else f"dead ({describe_exit(rank.exitcode)})"
            info = rank.info
            lines.append(
                f"  rank {rank.rank}: {state}, pid {info.get('pid', '?')}, device {info.get('device', '?')}, "
                f"backend {info.get('backend')}"
            )
        lines += [f"  {line}" for line in group.checkpoints.lines()]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.status()

    # -------------------------------------------------------------- internals
    def _live(self) -> RankGroup:
        if self._group is None:
            raise RanksError("The ranks are stopped; start them with start() or `%ranks start N`.")
        return self._group

    def _chosen(self, ranks: Any) -> list[int]:
        group = self._live()
        every = [r.rank for r in group.ranks]
        if ranks is None:
            return every
        chosen = [ranks] if isinstance(ranks, int) else list(ranks)
        unknown = [r for r in chosen if r not in every]
        if unknown or not chosen or len(set(chosen)) != len(chosen):
            raise ConfigError(
                f"ranks={ranks!r} must name distinct ranks of this group ({every[0]}..{every[-1]}); "
                f"{unknown[0] if unknown else 'none or repeated ranks'} given."
            )
        return sorted(chosen)

    def _request(self, command: str, payload: Any, chosen: Sequence[int]) -> dict[int, Any]:
        group = self._live()
        if group.broken:
            raise RanksBroken(group.broken, _outputs(group))
        try:
            replies = group.request(command, payload, chosen)
        except KeyboardInterrupt:
            raise _interrupted(group, chosen) from None
        failures = {
            r: failure_from_reply(r, reply["error"])
            for r, reply in replies.items()
            if reply and not reply["ok"]
        }
        if group.broken:
            raise RanksBroken(group.broken, _outputs(group, failures))
        if failures:
            raise RankError(failures, [r for r in chosen if r not in failures])
        return replies


def plan_group(
    *,
    num_processes: Any,
    config: Any,
    start_method: str,
    overrides: dict[str, Any],
    say: Callable[[str], None],
) -> LaunchPlan:
    """The plan of a %%ranks group: resolved like notebook_launch (resolution/), on this machine only."""
    request = resolve_launch(
        layered_config(config, overrides),
        "ranks",
        num_processes=num_processes,
        type_given=overrides.get("distributed_type") is not None,
        start_method=start_method,
    )
    for note in request.notes:
        say(f"ranks: {note}")
    if request.start_method == "fork":
        from ..launch.warm.warmup import warm_up

        warm_up(request.config)
    addr, port, store = planning.rendezvous(request)
    specs = planning.make_specs(request, (addr, port), None)
    return planning.plan_started_by(request, specs=specs, target=None, store=store)


def _cell_name() -> str:
    global _cell_counter
    _cell_counter += 1
    return f"<ranks cell {_cell_counter}>"


def _outputs(group: RankGroup, failures: Mapping[int, Any] | None = None) -> dict[int, str]:
    """What to show for a broken group: a dead rank's last output, a failing rank's traceback."""
    shown = {r.rank: r.tail() for r in group.ranks if not r.alive}
    for rank, failure in (failures or {}).items():
        shown.setdefault(rank, failure.traceback or "")
    return shown


def _interrupted(group: RankGroup, chosen: Sequence[int]) -> CellInterrupted:
    where, stuck = {}, []
    for rank in (group.by_rank(r) for r in chosen):
        error = (rank.reply or {}).get("error")
        if error:
            where[rank.rank] = error["traceback"]
        elif rank.status == "stuck":
            stuck.append(rank.rank)
    return CellInterrupted(where, stuck)
