"""A pipeline's data: only the ranks of its first and last stages read the batches.

The first stage needs the inputs and the last the targets; a stage in the middle needs neither (it
receives activations from the stage before). So the prepared loader of a middle stage never indexes
the dataset: it follows the same plan of batches (the sampler's indices, so every stage takes the
same number of steps and saves the same position) and yields the batch's *structure* with no rows:
each tensor as `torch.empty((0, *rest))` of its dtype, other values as None, in the same
tuple/list/dict shape. A loop written for one process (`for x, y in loader: model.step(x, target=y)`,
`x.to(device)`, `batch["input_ids"]`) runs unchanged on every stage; model.step ignores what a middle
stage is given.

The structure comes from the rank of stage 0 (the pp group's rank 0 in every placement torch uses):
at the first batch of each pass it broadcasts it over the pp group, once, in step with the other
stages' loaders. Map-style datasets only: a stream (an IterableDataset) is still read on every stage.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from .loader import DataLoaderShard, FixedBatches


@dataclass(frozen=True)
class StageData:
    """How one pipeline rank takes part: whether it reads the batches (first or last stage) and the
    pp group the batch structure travels over (from group rank 0, the first stage's rank)."""

    reads: bool
    group: Any


class StageDataLoader(DataLoaderShard):
    """DataLoaderShard on a pipeline rank: a middle stage yields empty placeholders (stage_batches)."""

    def __init__(self, loader: DataLoader, *, stage: StageData, **kwargs: Any) -> None:
        super().__init__(loader, **kwargs)
        self.stage = stage

    def _batch_loader(self, batches: list[list[int]], kwargs: dict[str, Any]) -> Iterable[Any]:
        if not batches:
            return []
        if self.stage.reads:
            return self._read_and_tell(
                DataLoader(self.dataset, batch_sampler=FixedBatches(batches), **kwargs)
            )
        return self._placeholders(len(batches))

    def _read_and_tell(self, loader: DataLoader) -> Iterator[Any]:
        for index, batch in enumerate(loader):
            if index == 0:
                _share_structure(structure_of(batch), self.stage.group)
            yield batch

    def _placeholders(self, count: int) -> Iterator[Any]:
        structure = _share_structure(None, self.stage.group)
        for _ in range(count):
            yield placeholder(structure)


def _share_structure(structure: Any, group: Any) -> Any:
    """The first stage's batch structure on every rank of the pp group (a collective of the group)."""
    box = [structure]
    dist.broadcast_object_list(box, group=group, group_src=0)
    return box[0]


def structure_of(batch: Any) -> Any:
    """A batch's shape without its values: ("tensor", dtype, trailing dims) for each tensor."""
    if isinstance(batch, torch.Tensor):
        return ("tensor", batch.dtype, tuple(batch.shape[1:]))
    if isinstance(batch, Mapping):
        return ("dict", {key: structure_of(value) for key, value in batch.items()})
    if isinstance(batch, tuple | list):
        return ("list" if isinstance(batch, list) else "tuple", [structure_of(item) for item in batch])
    return ("other",)


def placeholder(structure: Any) -> Any:
    """A batch of that structure with no rows (tensors of 0 samples; non-tensor values None)."""
    kind = structure[0]
    if kind == "tensor":
        return torch.empty((0, *structure[2]), dtype=structure[1])
    if kind == "dict":
        return {key: placeholder(value) for key, value in structure[1].items()}
    if kind in ("list", "tuple"):
        items = [placeholder(item) for item in structure[1]]
        return items if kind == "list" else tuple(items)
    return None
