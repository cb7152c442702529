"""Bytes per rank on a ParallelismConfig mesh: a pipeline (pp_size) keeps one stage's blocks per
rank (cut as config/pipeline.py cuts, evenly by parameter count; the largest stage counts), tensor
parallel splits the planned layers' weights over tp_size ranks (colwise: a Linear's out rows and
bias; rowwise: its in columns), then FSDP2 splits dim 0 of every local piece over dp_shard_size
ranks, as torch's fully_shard does."""

from __future__ import annotations

import math
from typing import Any

from ..config.tp_plan import matches, model_plan, split_dim
from ..errors import ConfigError


def local_numels(
    model: Any, plan: dict[str, str] | None, tp_size: int, dp_shard_size: int, keep: set[int] | None = None
) -> list[tuple]:
    """(local numel, element size, trainable) of every distinct parameter on the rank holding most
    (of the parameters whose ids are in `keep`, when given: one pipeline stage's)."""
    plan = plan if plan is not None else model_plan(model)
    if tp_size > 1 and not plan:
        raise ConfigError(
            f"tp_size={tp_size}, but {type(model).__name__} has no tensor-parallel plan to estimate with: give the "
            "model a `_tp_plan` ({'layers.*.q_proj': 'colwise', ...}) or pass tp_plan=."
        )
    modules = dict(model.named_modules())
    split: dict[int, int] = {}  # id(parameter) -> the dim TP splits
    for pattern, style in (plan or {}).items() if tp_size > 1 else ():
        for name in matches(pattern, list(modules)):
            dims = split_dim(modules[name], style)
            if dims is None:
                continue
            weight = getattr(modules[name], "weight", None)
            if weight is not None:
                split[id(weight)] = dims[2]
            bias = getattr(modules[name], "bias", None)
            if bias is not None and dims[2] == 0 and hasattr(modules[name], "out_features"):
                split[id(bias)] = 0  # a colwise Linear's bias is split with its rows
    seen: dict[int, tuple] = {}
    for p in model.parameters():
        if id(p) in seen or (keep is not None and id(p) not in keep):
            continue
        shape = list(p.shape) or [1]
        if id(p) in split:
            shape[split[id(p)]] = math.ceil(shape[split[id(p)]] / tp_size)
        shape[0] = math.ceil(shape[0] / dp_shard_size)
        seen[id(p)] = (math.prod(shape), p.element_size(), p.requires_grad)
    return list(seen.values())


def mesh_bytes(
    model: Any, plan: dict[str, str] | None, tp_size: int, dp_shard_size: int, states: int, pp_size: int = 1
) -> tuple:
    """(parameters, gradients, optimizer state) bytes per rank (the largest pipeline stage's)."""
    stages: list[set[int] | None] = [None]
    if pp_size > 1:
        from ..config.pipeline import stage_bounds, units

        blocks = units(model)
        starts = [*stage_bounds(blocks, pp_size, None), len(blocks)]
        stages = [
            {id(p) for _, module in blocks[a:b] for p in module.parameters()}
            for a, b in zip(starts, starts[1:], strict=False)
        ]
    rows = []
    for keep in stages:
        local = local_numels(model, plan, tp_size, dp_shard_size, keep)
        params = sum(n * size for n, size, _ in local)
        grads = sum(n * size for n, size, trainable in local if trainable)
        rows.append((params, grads, states * grads))
    return max(rows)


def mesh_name(tp_size: int, dp_shard_size: int, dp_replicate_size: int = 1, pp_size: int = 1) -> str:
    parts = [f"PP={pp_size}"] if pp_size > 1 else []
    parts += [f"TP={tp_size}"] if tp_size > 1 else []
    if dp_shard_size > 1:
        parts.append(f"FSDP={dp_shard_size}")
    if dp_replicate_size > 1:
        parts.append(f"replicas={dp_replicate_size}")
    return " x ".join(parts) or "one rank"
