"""`estimate_memory`: bytes per rank for parameters, gradients and optimizer state under DDP, FSDP
(each sharding strategy), DeepSpeed ZeRO 1/2/3, with and without offload, per precision and
number of processes — worked out from the model's parameter shapes, built on the meta device.

What is counted, per rank (the rank holding the most), as the strategies here really hold it:

- DDP: whole parameters and gradients (`.grad`; DDP's reduce buckets hold another copy of them
  while reducing), optimizer state for every parameter. Mixed precision autocasts: storage
  stays in the model's dtype.
- FSDP (FSDP2): dim 0 of every parameter split in `ceil(dim0 / shards)` rows, as `fully_shard`
  does; sharded gradients and optimizer state alike, in the model's dtype (mixed precision only
  changes the dtype layers are gathered in). HYBRID_SHARD shards within a machine.
- ZeRO: DeepSpeed casts parameters and gradients to 16 bits in fp16/bf16 and keeps an fp32
  master partition; in fp32 stage 1/2 still keep a separate fp32 partition, stage 3 (here) does
  not (runtime/strategies/deepspeed/memory.py). Stage 1 partitions optimizer state, 2 also
  gradients, 3 also parameters — a parameter of at most `stage3_param_persistence_threshold`
  elements (default 100000) ZeRO-3 also keeps whole on every rank, beside its partition.
- Offload: FSDP `fsdp_offload_params` keeps shards, gradients and optimizer state in CPU memory;
  ZeRO `offload_optimizer` moves optimizer state, master and (stage 2/3) gradient partitions,
  and stage 3's `offload_param` the parameter partitions. Offloaded bytes are shown apart.

Not counted: activations, gathered layers during a step, communication buckets, and the CUDA /
allocator overhead — they depend on the batch and the schedule, not on the model's size alone.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, cast

from ..errors import ConfigError
from ..system.host_memory import format_bytes
from .model_source import build_on_meta

STRATEGIES = (
    "DDP",
    "FSDP FULL_SHARD",
    "FSDP SHARD_GRAD_OP",
    "FSDP HYBRID_SHARD",
    "ZeRO-1",
    "ZeRO-2",
    "ZeRO-3",
)
PRECISIONS = ("no", "fp16", "bf16", "fp8")
OPTIMIZER_STATES = {"adamw": 2, "adam": 2, "sgd-momentum": 1, "sgd": 0}
PERSISTENCE_THRESHOLD = 100_000  # DeepSpeed's stage3_param_persistence_threshold default
_HEADERS = ("strategy", "offload", "precision", "processes", "parameters", "gradients", "optimizer", "total")


@dataclass(frozen=True)
class Param:
    numel: int
    dim0: int
    element_size: int
    trainable: bool


@dataclass(frozen=True)
class EstimateRow:
    """Bytes one rank holds (device memory; `offloaded` is what sits in CPU memory instead)."""

    strategy: str
    offload: bool
    precision: str
    processes: int
    parameters: int
    gradients: int
    optimizer: int
    offloaded: int

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer

    def cells(self) -> tuple[str, ...]:
        offload = "yes" if self.offload else "no"
        amounts = [format_bytes(v) for v in (self.parameters, self.gradients, self.optimizer, self.total)]
        if self.offloaded:
            amounts[-1] += f" (+{format_bytes(self.offloaded)} CPU)"
        return (self.strategy, offload, self.precision, str(self.processes), *amounts)


class MemoryEstimate:
    """A table of EstimateRow; prints as text, shows as an HTML table in a notebook."""

    def __init__(self, rows: list[EstimateRow], num_parameters: int, optimizer: str) -> None:
        self.rows = rows
        self.num_parameters = num_parameters
        self.optimizer = optimizer

    def find(
        self, strategy: str, *, processes: int | None = None, precision: str = "no", offload: bool = False
    ):
        """The row of one strategy (and processes / precision / offload); KeyError when absent."""
        for row in self.rows:
            if (row.strategy, row.precision, row.offload) == (strategy, precision, offload) and (
                processes is None or row.processes == processes
            ):
                return row
        raise KeyError(f"no row for {strategy!r} ({processes=}, {precision=}, {offload=})")

    def to_dicts(self) -> list[dict[str, Any]]:
        return [dict(asdict(row), total=row.total) for row in self.rows]

    def title(self) -> str:
        return (
            f"Bytes per rank for {self.num_parameters / 1e6:,.1f}M parameters, {self.optimizer} "
            "(parameters, gradients, optimizer state; no activations)"
        )

    def __str__(self) -> str:
        lines = [_HEADERS, *(row.cells() for row in self.rows)]
        widths = [max(len(line[i]) for line in lines) for i in range(len(_HEADERS))]
        text = [
            "  ".join(
                cell.rjust(w) if i > 3 else cell.ljust(w)
                for i, (cell, w) in enumerate(zip(line, widths, strict=True))
            )
            for line in lines
        ]
        text.insert(1, "  ".join("-" * w for w in widths))
        return self.title() + "\n" + "\n".join(text)

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        import html

        head = "".join(f"<th>{h}</th>" for h in _HEADERS)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row.cells()) + "</tr>" for row in self.rows
        )
        return f"<p>{html.escape(self.title())}</p><table><tr>{head}</tr>{body}</table>"


def estimate_memory(
    model: Any,
    num_processes: int | Sequence[int] = 2,
    *,
    strategies: Iterable[str] | None = None,
    mixed_precision: str | Sequence[str] = "no",
    optimizer: str = "adamw",
    offload: bool | str = False,
    num_machines: int = 1,
    tp_size: int = 1,
    dp_shard_size: int = 1,
    tp_plan: dict[str, str] | None = None,
    pp_size: int = 1,
) -> MemoryEstimate:
    """Bytes per rank for parameters, gradients and optimizer state, as a table.

    model: an nn.Module (real or on the meta device), a function or class that builds one (built
    here on the meta device: no memory), or "file.py[:name]" / "package.module:name".
    num_processes: the total number of processes (one or several counts); num_machines splits
    them for HYBRID_SHARD. optimizer: "adamw", "adam", "sgd-momentum" or "sgd".
    offload: False, True, or "both" (rows without and with). strategies: a subset of STRATEGIES.
    tp_size > 1 (with dp_shard_size): one more row per precision for that mesh (its own process count),
    the model's own plan (`_tp_plan`) or tp_plan= saying which layers are split. pp_size > 1 (a chain
    of blocks, as prepare cuts it): that row keeps the largest pipeline stage (an even split by parameter count).
    """
    counts = [num_processes] if isinstance(num_processes, int) else list(num_processes)
    precisions = [mixed_precision] if isinstance(mixed_precision, str) else list(mixed_precision)
    chosen = list(strategies) if strategies is not None else list(STRATEGIES)
    offloads = {False: [False], True: [True], "both": [False, True]}.get(offload)
    _check(counts, precisions, chosen, optimizer, offloads, offload, num_machines)
    built = build_on_meta(model)
    params = parameters_of(built)
    rows = [
        per_rank(params, strategy, n, precision, optimizer, off, num_machines)
        for strategy in chosen
        for off in cast(list[bool], offloads)  # _check refused None
        for precision in precisions
        for n in counts
        if not (off and strategy == "DDP")  # DDP has nothing to offload
    ]
    if tp_size > 1 or dp_shard_size > 1 or pp_size > 1:
        from .mesh_estimate import mesh_bytes, mesh_name

        states = OPTIMIZER_STATES[optimizer]
        held, grads, opt = mesh_bytes(built, tp_plan, tp_size, dp_shard_size, states, pp_size)
        name, n = mesh_name(tp_size, dp_shard_size, pp_size=pp_size), tp_size * dp_shard_size * pp_size
        rows += [EstimateRow(name, False, p, n, held, grads, opt, 0) for p in precisions]
    return MemoryEstimate(rows, sum(p.numel for p in params), optimizer)


def parameters_of(model: Any) -> list[Param]:
    """Every distinct parameter's size (tied parameters count once)."""
    seen: dict[int, Param] = {}
    for p in model.parameters():
        if id(p) not in seen:
            dim0 = p.shape[0] if p.dim() > 0 else 1
            seen[id(p)] = Param(p.numel(), int(dim0), p.element_size(), p.requires_grad)
    return list(seen.values())


def per_rank(
    params: list[Param],
    strategy: str,
    n: int,
    precision: str,
    optimizer: str,
    offload: bool,
    machines: int = 1,
) -> EstimateRow:
    """One row: what the rank holding the most keeps for this strategy."""
    states = OPTIMIZER_STATES[optimizer]
    trainable = [p for p in params if p.trainable]
    if strategy == "DDP":
        full = sum(p.numel * p.element_size for p in params)
        grads = sum(p.numel * p.element_size for p in trainable)
        opt = states * grads
        return EstimateRow(strategy, False, precision, n, full, grads, opt, 0)
    if strategy.startswith("FSDP"):
        shards = n // machines if strategy == "FSDP HYBRID_SHARD" else n
        local = {id(p): math.ceil(p.dim0 / shards) * (p.numel // max(p.dim0, 1)) for p in params}
        held = sum(local[id(p)] * p.element_size for p in params)
        grads = sum(local[id(p)] * p.element_size for p in trainable)
        opt = states * grads
        if offload:
            return EstimateRow(strategy, True, precision, n, 0, 0, 0, held + grads + opt)
        return EstimateRow(strategy, False, precision, n, held, grads, opt, 0)
    stage = int(strategy[-1])
    return _zero(params, trainable, stage, n, precision, states, offload)


def _zero(params, trainable, stage, n, precision, states, offload) -> EstimateRow:
    half = precision in ("fp16", "bf16", "fp8")

    def size(p: Param) -> int:
        return 2 if half and p.element_size == 4 else p.element_size

    def part(p: Param) -> int:
        return math.ceil(p.numel / n)

    def held(p: Param) -> int:  # ZeRO-3 keeps a small ("persistent") parameter whole besides its partition
        return part(p) + (p.numel if p.numel <= PERSISTENCE_THRESHOLD else 0)

    params_b = sum((held(p) if stage == 3 else p.numel) * size(p) for p in params)
    grads_b = sum((part(p) if stage >= 2 else p.numel) * size(p) for p in trainable)
    opt_numel = sum(part(p) for p in trainable)
    master = 0 if (stage == 3 and not half and not offload) else 4 * opt_numel
    opt_b = states * 4 * opt_numel + master
    cpu = 0
    if offload:
        cpu += opt_b + (grads_b if stage >= 2 else 0)
        opt_b, grads_b = 0, grads_b if stage < 2 else 0
        if stage == 3:
            cpu, params_b = cpu + params_b, 0
    return EstimateRow(f"ZeRO-{stage}", offload, precision, n, params_b, grads_b, opt_b, cpu)


def _check(counts, precisions, chosen, optimizer, offloads, offload, machines) -> None:
    for n in counts:
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ConfigError(f"num_processes={n!r}: every count must be a whole number >= 1.")
        if n % machines:
            raise ConfigError(f"num_processes={n} is not a multiple of num_machines={machines}.")
    for p in precisions:
        if p not in PRECISIONS:
            raise ConfigError(f"mixed_precision={p!r} is not one of {', '.join(PRECISIONS)}.")
    for s in chosen:
        if s not in STRATEGIES:
            raise ConfigError(f"strategy {s!r} is not one of: {', '.join(STRATEGIES)}.")
    if optimizer not in OPTIMIZER_STATES:
        raise ConfigError(f"optimizer={optimizer!r} is not one of {', '.join(OPTIMIZER_STATES)}.")
    if offloads is None:
        raise ConfigError(f"offload={offload!r}: use False, True or 'both'.")
    if not isinstance(machines, int) or machines < 1:
        raise ConfigError(f"num_machines={machines!r} must be a whole number >= 1.")
