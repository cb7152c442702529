"""Which items of a stream (an IterableDataset) each rank takes: pure, no tensors, testable by table.

A stream has no indices to deal out, so every rank reads the whole stream and keeps its part, as
Accelerate's IterableDatasetShard does. The stream is cut into rounds of `batch_size * world_size`
items (`split_batches`: one batch of `batch_size`), and rank r takes the r-th slice of each round.
An incomplete last round is completed with items from the start of the stream (cycled when the
stream is shorter than a round) under `even_batches`, so every rank takes the same number of steps;
it is dropped under `drop_last`; with neither, each rank takes what is left of its slice, if any.

One process takes the stream's batches as they come (a short last batch stays short), as
Accelerate leaves a world of one unsharded. These are the batches a map-style dataset of the same samples gets from `index_plan.plan_epoch`
(tests/test_iterable_dataset.py checks that for every length 1-40). `StreamStep.real` says how
many samples of a completed round are genuine, so gather_for_metrics can drop the repeated ones.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ...errors import ConfigError


@dataclass(frozen=True)
class StreamStep:
    """One step of one rank: its items, whether it is the epoch's last, and the padding it holds."""

    items: list[Any]
    last: bool
    real: int | None = None  # genuine samples (all ranks) in this round when it was padded, else None
    size: int | None = None  # samples (all ranks) in this padded round, padding included


def round_shape(world_size: int, batch_size: int | None, split_batches: bool) -> tuple[int, int]:
    """(items per round, items per rank per round); batch_size=None: the stream yields whole batches."""
    if batch_size is None:
        if split_batches:
            raise ConfigError(
                "split_batches=True needs a DataLoader batch_size to split, but this DataLoader has "
                "batch_size=None (its dataset yields whole batches); set a batch_size or use "
                "split_batches=False."
            )
        return world_size, 1
    if split_batches:
        if batch_size % world_size:
            raise ConfigError(
                f"split_batches=True needs the DataLoader batch_size ({batch_size}) to be a multiple of "
                f"the number of processes ({world_size}); change batch_size or use split_batches=False."
            )
        return batch_size, batch_size // world_size
    return batch_size * world_size, batch_size


def steps_in_stream(
    length: int,
    *,
    rank: int,
    world_size: int,
    batch_size: int | None,
    split_batches: bool,
    even_batches: bool,
    drop_last: bool,
) -> int:
    """How many steps this rank takes from a stream of `length` items (what len() reports)."""
    per_round, share = round_shape(world_size, batch_size, split_batches)
    even_batches = even_batches and world_size > 1
    full, rest = divmod(length, per_round)
    if rest == 0 or drop_last:
        return full
    if even_batches:
        return full + 1
    return full + (1 if rest > rank * share else 0)


def shard_stream(
    items: Iterable[Any],
    *,
    rank: int,
    world_size: int,
    batch_size: int | None,
    split_batches: bool,
    even_batches: bool,
    drop_last: bool,
    size_of: Callable[[Any], int] | None = None,
) -> Iterator[StreamStep]:
    """This rank's steps over the stream, each marked `last` one step ahead (one round read ahead).

    size_of counts the samples in an item (for streams of whole batches); by default an item is one."""
    per_round, share = round_shape(world_size, batch_size, split_batches)
    mine = slice(rank * share, (rank + 1) * share)
    even = even_batches and world_size > 1  # a world of one is not sharded: nothing to even out
    steps = _rank_steps(iter(items), per_round, mine, even, drop_last, size_of or _one)
    current = next(steps, None)
    while current is not None:
        following = next(steps, None)
        items_, real, size = current
        yield StreamStep(items_, following is None, real, size)
        current = following


def _one(_item: Any) -> int:
    return 1


def _rank_steps(items: Iterator[Any], per_round: int, mine: slice, even: bool, drop_last: bool, size_of):
    head: list[Any] = []  # the stream's first round: what an incomplete last round wraps around to
    current: list[Any] = []
    for item in items:
        current.append(item)
        if len(head) < per_round:
            head.append(item)
        if len(current) == per_round:
            yield current[mine], None, None
            current = []
    if not current or drop_last:
        return
    if not even:
        if current[mine]:
            yield current[mine], None, None
        return
    real = sum(size_of(item) for item in current)
    current += list(itertools.islice(itertools.cycle(head), per_round - len(current)))
    yield current[mine], real, sum(size_of(item) for item in current)
