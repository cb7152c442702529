"""Reading the user's stream (an IterableDataset) item by item, and collating a rank's share of it.

The rounds (stream_plan.py) are cut from the stream as the user's own DataLoader would deliver it
on one process, so DataLoader workers keep working: with `num_workers > 0` the workers read the
dataset (a dataset that splits itself with `get_worker_info()` is read once, interleaved as torch
interleaves it), hand over their samples uncollated, and the rank collates its share with the
user's `collate_fn`. Cutting the rounds here, after the workers, keeps every rank's step count and
the wrap-around padding right however the workers split the stream.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch.utils.data import DataLoader

from ..ops import recursively_apply

_WORKER_KEYS = (
    "num_workers",
    "timeout",
    "worker_init_fn",
    "multiprocessing_context",
    "persistent_workers",
    "generator",
)


class StreamReader:
    """The user's stream, uncollated, in the order the user's DataLoader would deliver it."""

    def __init__(self, loader: DataLoader) -> None:
        self.loader = loader
        self.whole_batches = loader.batch_size is None  # auto-collation off: the dataset yields batches
        self._workers: DataLoader | None = None  # kept, so persistent_workers persist across epochs

    def items(self) -> Iterator[Any]:
        """Samples (or, for batch_size=None, the dataset's own batches) one by one."""
        base = self.loader
        if base.num_workers == 0:
            return iter(base.dataset)
        if self._workers is None:
            kwargs = {key: getattr(base, key) for key in _WORKER_KEYS if hasattr(base, key)}
            if getattr(base, "prefetch_factor", None) is not None:
                kwargs["prefetch_factor"] = base.prefetch_factor
            self._workers = DataLoader(
                base.dataset, batch_size=base.batch_size, collate_fn=_unchanged, **kwargs
            )
        chunks = iter(self._workers)
        return chunks if self.whole_batches else itertools.chain.from_iterable(chunks)

    def collate(self, items: list[Any]) -> Any:
        """One step's batch, made by the user's collate_fn (pinned if the user's loader pins)."""
        collate_fn = self.loader.collate_fn
        batch = collate_fn(items[0]) if self.whole_batches else collate_fn(items)
        if self.loader.pin_memory and torch.cuda.is_available():
            batch = recursively_apply(lambda t: t.pin_memory(), batch)
        return batch

    def size_of(self, item: Any) -> int:
        """Samples in one stream item: 1, or a whole batch's leading dimension."""
        return _leading_size(item) if self.whole_batches else 1


def _unchanged(chunk: Any) -> Any:
    """The workers' collate_fn: hand the samples over as they are (module level, so spawn can pickle it)."""
    return chunk


def _leading_size(item: Any) -> int:
    """The first dimension of the first array in a (nested) batch; 1 when it holds no array."""
    array = _first_array(item)
    return int(array.shape[0]) if array is not None else 1


def _first_array(item: Any) -> Any:
    if hasattr(item, "shape"):
        return item if len(item.shape) > 0 else None
    values = item.values() if isinstance(item, Mapping) else item if isinstance(item, (list, tuple)) else ()
    return next((a for a in map(_first_array, values) if a is not None), None)
