"""Which sample indices each rank takes: pure index arithmetic, no tensors, easy to test by table.

Batches are dealt round-robin (rank r takes global batches r, r+W, ...), or, with split_batches,
every global batch is cut into W equal slices. With even_batches the last round is completed by
wrapping around to the start of the epoch's order, so every rank runs the same number of steps;
`RoundPlan.real` says how many samples of the last round are genuine, which gather_for_metrics
uses to drop the wrapped duplicates.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from ...errors import ConfigError


@dataclass(frozen=True)
class ShardPlan:
    """One epoch's plan for one rank: its batches, and how many genuine samples the last round has."""

    batches: list[list[int]]
    last_round_real: int | None  # samples (over all ranks) that are not wrap-around padding
    last_round_size: int | None  # samples (over all ranks) in the last round including padding


def plan_epoch(
    global_batches: list[list[int]],
    *,
    rank: int,
    world_size: int,
    batch_size: int,
    split_batches: bool,
    even_batches: bool,
    drop_last: bool,
) -> ShardPlan:
    """Assign this epoch's batches (as the original loader would make them) to one rank.

    One process gets the loader's batches unchanged (Accelerate does not shard a world of one), so a
    short last batch stays short."""
    if world_size == 1:
        return ShardPlan([list(b) for b in global_batches], None, None)
    if split_batches:
        return _plan_split(global_batches, rank, world_size, batch_size, even_batches, drop_last)
    return _plan_round_robin(global_batches, rank, world_size, batch_size, even_batches, drop_last)


def _wrapping_source(order: list[int]):
    return itertools.cycle(order) if order else iter(())


def _plan_round_robin(batches, rank, world, batch_size, even, drop_last) -> ShardPlan:
    if drop_last:
        full_rounds = len(batches) // world
        kept = batches[: full_rounds * world]
        return ShardPlan([list(b) for b in kept[rank::world]], None, None)
    if not even or not batches:
        return ShardPlan([list(b) for b in batches[rank::world]], None, None)
    order = [i for b in batches for i in b]
    rounds = -(-len(batches) // world)
    padded = [list(b) for b in batches] + [[] for _ in range(rounds * world - len(batches))]
    last_round = padded[(rounds - 1) * world :]
    real_last = sum(len(b) for b in last_round)
    wrap = _wrapping_source(order)
    for b in last_round:
        while len(b) < batch_size:
            b.append(next(wrap))
    return ShardPlan(padded[rank::world], real_last, world * batch_size)


def _plan_split(batches, rank, world, batch_size, even, drop_last) -> ShardPlan:
    if batch_size % world:
        raise ConfigError(
            f"split_batches=True needs the DataLoader batch_size ({batch_size}) to be a multiple of the "
            f"number of processes ({world}); change batch_size or use split_batches=False."
        )
    share = batch_size // world
    batches = [list(b) for b in batches]
    last_real = last_size = None
    if batches and len(batches[-1]) < batch_size and not drop_last:
        last_real = len(batches[-1])
        if even:
            order = [i for b in batches for i in b]
            wrap = _wrapping_source(order)
            while len(batches[-1]) < batch_size:
                batches[-1].append(next(wrap))
            last_size = batch_size
        else:
            last_real = None
    elif batches and not drop_last:
        last_real = last_size = batch_size
    mine = [b[rank * share : (rank + 1) * share] for b in batches]
    return ShardPlan([b for b in mine if b], last_real, last_size)
