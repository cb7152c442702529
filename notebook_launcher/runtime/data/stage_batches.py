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
stages' loaders. A stream (an IterableDataset, or any dataset under dispatch_batches) has no plan
known beforehand, so there stage 0's rank tells the pp group at each step: this step's structure,
whether it is the pass's last, its remainder and position, or that the pass has no (more) steps.
A middle stage never iterates the stream; the first and last stages read it as without a pipeline,
and under dispatch_batches process 0 alone reads and sends each global batch to the reading ranks
only (`StageData.readers`).
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
    """How one pipeline rank takes part: whether it reads the batches (first or last stage), the
    pp group the batch structure travels over (from group rank 0, the first stage's rank), whether
    the pipeline has middle ranks at all (none: a stream needs no telling), and the group of the
    reading ranks that dispatched batches go to (None: every process)."""

    reads: bool
    group: Any
    has_middle: bool = True
    readers: Any = None


class StageDataLoader(DataLoaderShard):
    """DataLoaderShard on a pipeline rank: a middle stage yields empty placeholders (stage_batches)."""

    def __init__(self, loader: DataLoader, *, stage: StageData, **kwargs: Any) -> None:
        super().__init__(loader, **kwargs)
        self.stage = stage
        self._dispatch_group = stage.readers

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

    # a stream: stage 0 tells each step (its structure, last, remainder, position) as it comes
    def _iter_iterable(self) -> Iterator[Any]:
        return self._stream_steps_told(super()._iter_iterable)

    def _iter_dispatched(self) -> Iterator[Any]:
        return self._stream_steps_told(super()._iter_dispatched)

    def _stream_steps_told(self, read: Any) -> Iterator[Any]:
        if not self.stage.has_middle:
            return read()
        return self._read_and_tell_steps(read()) if self.stage.reads else self._follow_steps()

    def _read_and_tell_steps(self, batches: Iterator[Any]) -> Iterator[Any]:
        """The reading ranks: each step told before it is yielded; the end told unless the last step
        said it was the last (every reading rank of a pp group takes the same steps, and follows
        stage 0's word on the last one: the same calls on every rank)."""
        ended = False
        for batch in batches:
            step = (structure_of(batch), self.end_of_dataloader, self.remainder, self.batches_yielded)
            ended = bool(_share_structure(step, self.stage.group)[1])
            yield batch
        if not ended:
            _share_structure(None, self.stage.group)

    def _follow_steps(self) -> Iterator[Any]:
        """A middle stage: a placeholder per step stage 0 tells, until it tells the last (or none)."""
        self._skip_next = 0  # the reading ranks skip (read past) the steps a resume leaves out
        while True:
            step = _share_structure(None, self.stage.group)
            if step is None:
                return
            structure, self.end_of_dataloader, self.remainder, self.batches_yielded = step
            yield placeholder(structure)
            if self.end_of_dataloader:
                return


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
