"""The data-order contract of Accelerate 1.x, in one process (the 2-process form is Accelerate's own
test_script.training_check, run by test_accelerate_own_scripts.py): the prepared loader's order comes
from the user's generator, a seedable sampler replays an epoch, a mid-epoch checkpoint replays the
rest of the pass, and every DistributedType member of Accelerate exists."""

import pytest
import torch
from accelerate.utils import DistributedType as Theirs
from torch.utils.data import DataLoader

from notebook_launcher.config import DISTRIBUTED_TYPES, LaunchConfig
from notebook_launcher.errors import ConfigError
from notebook_launcher.runtime.data import DataLoaderShard, GradientState, SeedableRandomSampler
from notebook_launcher.utils import DistributedType


def _shard(loader: DataLoader, **kwargs) -> DataLoaderShard:
    return DataLoaderShard(
        loader, rank=0, world_size=1, device=None, gradient_state=GradientState(), seed=3, **kwargs
    )


def _pass(loader) -> list[list[int]]:
    return [batch.tolist() for batch in loader]


def test_the_order_is_the_users_generator():
    generator = torch.Generator()
    plain = DataLoader(range(32), batch_size=8, shuffle=True, generator=generator)
    generator.manual_seed(42)
    expected = [_pass(plain) for _ in range(2)]
    prepared = _shard(DataLoader(range(32), batch_size=8, shuffle=True, generator=generator))
    generator.manual_seed(42)  # re-seeded after prepare, as Accelerate's training_check does
    assert [_pass(prepared) for _ in range(2)] == expected


def test_a_seedable_sampler_replays_an_epoch_after_set_seed():
    torch.manual_seed(42)
    loader = _shard(DataLoader(range(32), batch_size=8, shuffle=True), use_seedable_sampler=True)
    assert isinstance(loader.batch_sampler.batch_sampler.sampler, SeedableRandomSampler)
    first = [_pass(loader) for _ in range(3)]
    torch.manual_seed(42)
    loader.set_epoch(0)
    assert [_pass(loader) for _ in range(3)] == first
    assert first[0] != first[1]


def test_a_mid_epoch_checkpoint_replays_the_rest_of_the_pass():
    loader = _shard(DataLoader(range(32), batch_size=4, shuffle=True))
    _pass(loader)  # one whole epoch first: the generator has moved on
    batches = iter(loader)
    seen = [next(batches).tolist() for _ in range(3)]
    saved = loader.state_dict()
    rest = [b.tolist() for b in batches]
    resumed = _shard(DataLoader(range(32), batch_size=4, shuffle=True))
    resumed.load_state_dict(saved)
    assert _pass(resumed) == rest
    assert sorted(sum(seen + rest, [])) == list(range(32))


def test_len_draws_nothing_from_the_generator():
    generator = torch.Generator().manual_seed(1)
    loader = _shard(DataLoader(range(30), batch_size=8, shuffle=True, generator=generator))
    state = generator.get_state()
    assert len(loader) == 4
    assert torch.equal(generator.get_state(), state)


def test_every_accelerate_distributed_type_compares_and_only_ours_configure():
    assert {m.name: m.value for m in DistributedType} == {m.name: m.value for m in Theirs}
    assert DistributedType.XLA == "XLA" and DistributedType.MULTI_CPU != DistributedType.MULTI_NPU
    assert DISTRIBUTED_TYPES == ("NO", "MULTI_CPU", "MULTI_GPU", "FSDP", "DEEPSPEED")
    with pytest.raises(ConfigError, match="XLA"):
        LaunchConfig(distributed_type="XLA").validate()
