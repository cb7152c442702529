"""Which sample indices each rank gets, written out as tables (issue 2, item 4)."""

import pytest
import torch
from torch.utils.data import DataLoader

from notebook_launcher.errors import ConfigError
from notebook_launcher.runtime.data import DataLoaderShard, GradientState, plan_epoch

# (dataset size, batch size, split_batches, even_batches, drop_last) -> [rank0 batches, rank1 batches]
TABLE = {
    (10, 3, False, True, False): [[[0, 1, 2], [6, 7, 8]], [[3, 4, 5], [9, 0, 1]]],
    (10, 3, False, False, False): [[[0, 1, 2], [6, 7, 8]], [[3, 4, 5], [9]]],
    (10, 3, False, True, True): [[[0, 1, 2]], [[3, 4, 5]]],
    (10, 3, False, False, True): [[[0, 1, 2]], [[3, 4, 5]]],
    (5, 2, False, True, False): [[[0, 1], [4, 0]], [[2, 3], [1, 2]]],
    (3, 4, False, True, False): [[[0, 1, 2, 0]], [[1, 2, 0, 1]]],
    (3, 4, False, False, False): [[[0, 1, 2]], []],
    (8, 2, False, True, False): [[[0, 1], [4, 5]], [[2, 3], [6, 7]]],
    (10, 4, True, True, False): [[[0, 1], [4, 5], [8, 9]], [[2, 3], [6, 7], [0, 1]]],
    (10, 4, True, False, False): [[[0, 1], [4, 5], [8, 9]], [[2, 3], [6, 7]]],
    (10, 4, True, True, True): [[[0, 1], [4, 5]], [[2, 3], [6, 7]]],
    (9, 2, True, True, False): [[[0], [2], [4], [6], [8]], [[1], [3], [5], [7], [0]]],
}


def _global_batches(n, batch_size, drop_last):
    indices = list(range(n))
    batches = [indices[i : i + batch_size] for i in range(0, n, batch_size)]
    if drop_last and batches and len(batches[-1]) < batch_size:
        batches.pop()
    return batches


@pytest.mark.parametrize("case", list(TABLE), ids=[str(c) for c in TABLE])
def test_plan_matches_table(case):
    n, bs, split, even, drop_last = case
    for rank in (0, 1):
        plan = plan_epoch(
            _global_batches(n, bs, drop_last),
            rank=rank,
            world_size=2,
            batch_size=bs,
            split_batches=split,
            even_batches=even,
            drop_last=drop_last,
        )
        assert plan.batches == TABLE[case][rank], f"rank {rank}"


@pytest.mark.parametrize("case", list(TABLE), ids=[str(c) for c in TABLE])
def test_prepared_loader_yields_the_table(case):
    n, bs, split, even, drop_last = case
    data = torch.arange(n)
    for rank in (0, 1):
        loader = DataLoaderShard(
            DataLoader(data, batch_size=bs, drop_last=drop_last),
            rank=rank,
            world_size=2,
            device=None,
            gradient_state=GradientState(),
            split_batches=split,
            even_batches=even,
        )
        got = [batch.tolist() for batch in loader]
        assert got == TABLE[case][rank], f"rank {rank}"
        assert len(loader) == len(TABLE[case][rank])


def test_even_batches_gives_every_rank_the_same_number_of_steps():
    for n in range(1, 40):
        lengths = {
            len(
                plan_epoch(
                    _global_batches(n, 4, False),
                    rank=r,
                    world_size=3,
                    batch_size=4,
                    split_batches=False,
                    even_batches=True,
                    drop_last=False,
                ).batches
            )
            for r in range(3)
        }
        assert len(lengths) == 1, f"dataset of {n}: {lengths}"


@pytest.mark.parametrize("seedable", [False, True])
def test_shuffle_is_identical_across_ranks_and_changes_per_epoch(seedable):
    """Without a seedable sampler the order comes from the sampler's generator (one is given, from the
    agreed seed); with use_seedable_sampler=True set_epoch(0) replays epoch 0, as in Accelerate."""
    data = torch.arange(64)

    def loader(rank):
        return DataLoaderShard(
            DataLoader(data, batch_size=4, shuffle=True),
            rank=rank,
            world_size=2,
            device=None,
            gradient_state=GradientState(),
            seed=5,
            use_seedable_sampler=seedable,
            data_seed=5,
        )

    l0, l1 = loader(0), loader(1)
    epoch0 = [b for b in l0] + [b for b in l1]
    seen = sorted(torch.cat(epoch0).tolist())
    assert seen == list(range(64)), "ranks together see every sample exactly once"
    first_r0 = [b.tolist() for b in l0]  # auto-advanced to epoch 1
    assert first_r0 != [b.tolist() for b in epoch0[: len(first_r0)]]
    if seedable:
        l0.set_epoch(0)
        again_r0 = [b.tolist() for b in l0]
        assert again_r0 == [b.tolist() for b in epoch0[: len(again_r0)]]


def test_split_batches_needs_a_divisible_batch_size():
    with pytest.raises(ConfigError, match="batch_size \\(3\\)"):
        plan_epoch(
            [[0, 1, 2]],
            rank=0,
            world_size=2,
            batch_size=3,
            split_batches=True,
            even_batches=True,
            drop_last=False,
        )
