"""dispatch_batches: only the main process reads the data; every process gets its slice.

Accelerate's DataLoaderDispatcher semantics: per step the main process takes one batch of the
original loader per process (one batch in all with split_batches), joins them into one global
batch and sends it to everyone; process r keeps slice r. A last global batch that does not divide
by the number of processes is completed with the first samples of the pass (unless drop_last), so
every process takes the same number of steps. Used for IterableDatasets by default: a stream is
read once instead of once per process. On a mesh the reader is process 0 alone (not every process
of data rank 0: its tp/cp peers and other pipeline stages receive), and r is the data rank.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.distributed as dist

from ...errors import AcceleratorError
from .. import ops


@dataclass
class DispatchedBatch:
    batch: Any
    is_last: bool
    global_size: int  # samples in the global batch this slice came from (before completion)


def _join(batches: list[Any]) -> Any:
    first = batches[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(batches, dim=0)
    if isinstance(first, dict):
        return type(first)({key: _join([b[key] for b in batches]) for key in first})
    if (
        isinstance(first, (list, tuple))
        and first
        and all(isinstance(x, (torch.Tensor, dict, list, tuple)) for x in first)
    ):
        joined = [_join([b[i] for b in batches]) for i in range(len(first))]
        return type(first)(*joined) if hasattr(first, "_fields") else type(first)(joined)
    raise AcceleratorError(
        f"dispatch_batches=True needs batches made of tensors (or lists/dicts of tensors); got {type(first).__name__}. "
        "Use DataLoaderConfiguration(dispatch_batches=False) so each process reads its own batches."
    )


def _size(batch: Any) -> int:
    for leaf in _leaves(batch):
        return int(leaf.shape[0])
    raise AcceleratorError("dispatch_batches=True got a batch without any tensor; it cannot be sliced.")


def _leaves(data: Any) -> Iterator[torch.Tensor]:
    if isinstance(data, torch.Tensor):
        yield data
    elif isinstance(data, dict):
        for value in data.values():
            yield from _leaves(value)
    elif isinstance(data, (list, tuple)):
        for value in data:
            yield from _leaves(value)


def _rows(batch: Any, start: int, end: int) -> Any:
    return ops.recursively_apply(lambda t: t[start:end], batch)


def _global_batches(loader_iter: Iterator[Any], per_step: int) -> Iterator[Any]:
    while True:
        parts = []
        for _ in range(per_step):
            try:
                parts.append(next(loader_iter))
            except StopIteration:
                break
        if not parts:
            return
        yield _join(parts)
        if len(parts) < per_step:
            return


def dispatch(
    loader: Any,
    *,
    rank: int,
    world_size: int,
    split_batches: bool,
    drop_last: bool,
    reads: bool | None = None,
    group: Any = None,
) -> Iterator[DispatchedBatch]:
    """Iterate `loader` on the process that `reads` (process 0: the broadcast's source; by default
    data rank 0) and yield each data rank its slice of every global batch. `group`: the processes
    that take part (None: all; a pipeline leaves out its middle stages, stage_batches.py)."""
    reads = rank == 0 if reads is None else reads
    source = _global_batches(iter(loader), 1 if split_batches else world_size) if reads else None
    pending = next(source, None) if source is not None else None
    first: Any = None
    while True:
        if reads:
            current = pending
            pending = next(cast(Iterator[Any], source), None) if current is not None else None  # rank 0: set
            message = [None if current is None else current, pending is None]
        else:
            message = [None, None]
        current, is_last = _from_process_zero(message, group)
        if current is None:
            return
        size = _size(current)
        if first is None:
            first = current
        per_rank, extra = divmod(size, world_size)
        if extra and is_last and drop_last:
            if per_rank == 0:
                return
        elif extra:
            current = _join([current, _rows(first, 0, world_size - extra)])
            per_rank += 1
        share = _rows(current, rank * per_rank, (rank + 1) * per_rank)
        yield DispatchedBatch(share, bool(is_last), size)
        if is_last:
            return


def _from_process_zero(message: list[Any], group: Any) -> list[Any]:
    """Process 0's message on every process of `group` (None: every process)."""
    if group is None:
        return ops.broadcast_object_list(message, from_process=0)
    dist.broadcast_object_list(message, src=0, group=group)
    return message
