"""Where a prepared loader's shuffle comes from, with Accelerate 1.x's meaning.

The user's sampler and generator decide the order, so one process with batch 8×N and N processes
with batch 8 see the same samples per step when the generator is re-seeded after prepare
(Accelerate's test_script.training_check). A random sampler without a generator gets one (seeded
from the agreed seed; Accelerate does so on several processes, here on one too, so that the order
does not hang on the global RNG); its state is copied from rank 0 at the start of every pass, so all
ranks draw the same permutation, and saved with a mid-epoch checkpoint, so a resume replays it. `use_seedable_sampler=True` replaces a
RandomSampler by a SeedableRandomSampler: the order is a function of (data_seed or torch's initial
seed) + epoch, so `set_seed(42); loader.set_epoch(0)` replays it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, Sampler


class SeedableRandomSampler(RandomSampler):
    """A RandomSampler whose generator is re-seeded with initial_seed + epoch at each pass
    (Accelerate's name); initial_seed is data_seed, else torch's initial seed (what set_seed set)."""

    def __init__(self, *args: Any, data_seed: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.initial_seed = data_seed if data_seed is not None else torch.random.initial_seed()
        self.epoch = 0

    def __iter__(self) -> Iterator[int]:
        if self.generator is None:
            self.generator = torch.Generator()
        self.generator.manual_seed(self.initial_seed + self.epoch)
        yield from super().__iter__()
        self.set_epoch(self.epoch + 1)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch


class BatchSamplerShard(Sampler[list[int]]):
    """What `prepared_loader.batch_sampler` is, as in Accelerate: the original batch sampler
    (`.batch_sampler`) seen by one process; `even_batches` set here changes the loader's (as
    join_uneven_inputs(even_batches=...) does). Iterating it gives this process's batches."""

    def __init__(self, loader: Any, batch_sampler: Any) -> None:
        self._loader = loader
        self.batch_sampler = batch_sampler

    @property
    def even_batches(self) -> bool:
        return self._loader.even_batches

    @even_batches.setter
    def even_batches(self, value: bool) -> None:
        self._loader.even_batches = bool(value)
        self._loader._plan_cache = None

    @property
    def split_batches(self) -> bool:
        return self._loader.split_batches

    @property
    def num_processes(self) -> int:
        return self._loader.world_size

    @property
    def process_index(self) -> int:
        return self._loader.rank

    @property
    def batch_size(self) -> int | None:
        return getattr(self.batch_sampler, "batch_size", None)

    @property
    def drop_last(self) -> bool:
        return bool(getattr(self.batch_sampler, "drop_last", False))

    def set_epoch(self, epoch: int) -> None:
        self._loader.set_epoch(epoch)

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self._loader.plan().batches)

    def __len__(self) -> int:
        return len(self._loader)


def sampler_of(batch_sampler: Any) -> Any:
    """The sampler inside a batch sampler (itself when it has none)."""
    return getattr(batch_sampler, "sampler", batch_sampler)


def adopt_batch_sampler(
    loader: DataLoader, *, world_size: int, seed: int, use_seedable_sampler: bool, data_seed: int | None
) -> Any:
    """The batch sampler a prepared loader draws from: the user's, with Accelerate's two changes
    (a seedable sampler on request; a generator for a random sampler on several processes)."""
    batch_sampler: Any = loader.sampler if isinstance(loader.sampler, BatchSampler) else loader.batch_sampler
    sampler = sampler_of(batch_sampler)
    if not isinstance(sampler, RandomSampler):
        return batch_sampler
    if use_seedable_sampler:
        seedable = SeedableRandomSampler(
            sampler.data_source,
            replacement=sampler.replacement,
            num_samples=sampler._num_samples,
            generator=sampler.generator,
            data_seed=data_seed,
        )
        if isinstance(batch_sampler, BatchSampler) and type(batch_sampler) is BatchSampler:
            return BatchSampler(seedable, batch_sampler.batch_size, batch_sampler.drop_last)
        batch_sampler.sampler = seedable
        return batch_sampler
    if sampler.generator is None:  # one process too: an order that a checkpoint can replay
        sampler.generator = torch.Generator().manual_seed(seed)
    return batch_sampler


def shared_generator(batch_sampler: Any) -> torch.Generator | None:
    """The generator whose state rank 0 gives every rank at the start of a pass (Accelerate's
    synchronized_generator), and a checkpoint saves; None for a seedable sampler (its seed decides)."""
    sampler = sampler_of(batch_sampler)
    if isinstance(sampler, SeedableRandomSampler):
        return None
    generator = getattr(sampler, "generator", None)
    return generator if isinstance(generator, torch.Generator) else None


def count_batches(batch_sampler: Any) -> list[list[int]] | None:
    """The batches' shapes without drawing from any generator, for len() of a random sampler's
    loader (the order does not change how many batches there are); None when it cannot be known so."""
    sampler = sampler_of(batch_sampler)
    if type(batch_sampler) is not BatchSampler or not isinstance(sampler, RandomSampler):
        return None
    return [
        list(b) for b in BatchSampler(range(len(sampler)), batch_sampler.batch_size, batch_sampler.drop_last)
    ]
