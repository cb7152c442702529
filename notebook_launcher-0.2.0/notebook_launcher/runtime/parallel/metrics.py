"""gather_for_metrics on a mesh: ranks that differ only in tp/cp saw the same batch, so only one rank
per data-parallel group (tp = cp = 0) contributes, and each sample is counted once."""

from __future__ import annotations

from typing import Any

import torch

from ...config.parallelism import ParallelismConfig
from .. import ops
from .mesh import data_leaders


def gather_by_data_rank(
    data: Any, use_gather_object: bool, config: ParallelismConfig | None, world_size: int
) -> Any:
    """ops.gather / ops.gather_object, keeping the data-parallel leaders' parts in data-rank order."""
    if config is None or config.non_data_parallel_size == 1 or world_size == 1:
        return ops.gather_object(data) if use_gather_object else ops.gather(data)
    leaders = data_leaders(config, world_size)
    if use_gather_object:
        parts = ops.gather_object([data])  # one entry per rank
        kept = [parts[r] for r in leaders]
        if all(isinstance(p, list) for p in kept):
            return [item for p in kept for item in p]
        return kept

    def keep(t: torch.Tensor) -> torch.Tensor:
        chunks = t.chunk(world_size, dim=0) if t.dim() else [t]
        return torch.cat([chunks[r] for r in leaders], dim=0) if t.dim() else t

    return ops.recursively_apply(keep, ops.gather(data))
