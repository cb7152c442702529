"""Accelerate's debug mode: collectives first check that every rank passes matching tensors.

Turned on by `debug: true` in the launch config (notebook_launch and the CLI set Accelerate's
ACCELERATE_DEBUG_MODE=true in every worker), by that variable itself, or by `state.debug = True`. A rank that gathers,
reduces or broadcasts a tensor of another shape than its peers would otherwise hang or fail deep
in the backend; here every rank raises DistributedOperationException listing each rank's shapes.
It costs one small all_gather_object per collective, so it is off by default.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist

from ...errors import DistributedOperationException

_TRUE = ("1", "true", "yes", "on")
_switched: bool | None = None  # `state.debug = True/False` in this process, over the variable


def enabled() -> bool:
    if _switched is not None:
        return _switched
    return os.environ.get("ACCELERATE_DEBUG_MODE", "").strip().lower() in _TRUE


def switch(on: bool) -> None:
    """Turn the checks on or off in this process (Accelerate's `PartialState().debug = True`)."""
    global _switched
    _switched = bool(on)


def _shapes(data: Any, skip: int | None) -> Any:
    """The nested structure of data with each tensor replaced by its shape (dimension `skip` shown as
    "*": it may differ) and device type."""
    if isinstance(data, torch.Tensor):
        shape: list[Any] = list(data.shape)
        if skip is not None and -data.ndim <= skip < data.ndim:
            shape[skip] = "*"
        return (tuple(shape), data.device.type)
    if isinstance(data, dict):
        return {k: _shapes(v, skip) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_shapes(v, skip) for v in data]
    return type(data).__name__


def verify(operation: str, data: Any, *, skip_first_dim: bool = False, skip_dim: int | None = None) -> None:
    """Raise on every rank when the ranks' tensors differ in structure or shape (a collective).

    skip_first_dim: gather() concatenates along dim 0, so only the other dimensions must agree;
    skip_dim: the dimension pad_across_processes evens out.
    """
    if not enabled() or not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return
    mine = _shapes(data, 0 if skip_first_dim else skip_dim)
    every: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    if all(shape == every[0] for shape in every):
        return
    lines = "\n".join(f"  - rank {rank}: {shape}" for rank, shape in enumerate(every))
    what = (
        "shapes (beyond the dimension it joins or pads)"
        if skip_first_dim or skip_dim is not None
        else "shapes"
    )
    raise DistributedOperationException(
        f"Cannot {operation}: the ranks passed tensors of different {what} or structure (debug mode, "
        f"ACCELERATE_DEBUG_MODE):\n{lines}\nMake every rank pass the same structure and shapes, e.g. with "
        "accelerator.pad_across_processes() first."
    )
