"""Prepared data loaders: each rank gets its shard, all ranks shuffle alike, positions can be saved.

`DataLoaderShard` keeps the user's dataset, collate_fn and worker settings and replaces only the
choice of indices (see sharding.py). Shuffling uses one seed agreed by all ranks plus the epoch, so
every rank sees the same permutation and every epoch a new one.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, RandomSampler, Sampler

from .. import telemetry
from ..ops import send_to_device
from .index_plan import ShardPlan, plan_epoch

_LOADER_KEYS = (
    "num_workers",
    "collate_fn",
    "pin_memory",
    "timeout",
    "worker_init_fn",
    "multiprocessing_context",
    "persistent_workers",
)
_PROGRESS_EVERY_S = 0.25


@dataclass
class GradientState:
    """Shared between the Accelerator and its loaders: where in the epoch and accumulation we are."""

    num_steps: int = 1
    sync_gradients: bool = True
    end_of_dataloader: bool = False
    remainder: int = -1  # genuine samples in the current (last) round when it was padded, else -1
    round_size: int = -1
    loaders: list[Any] = field(default_factory=list)

    @property
    def in_dataloader(self) -> bool:
        return bool(self.loaders)


class _FixedBatches(Sampler[list[int]]):
    def __init__(self, batches: list[list[int]]) -> None:
        self.batches = batches

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


class DataLoaderShard:
    """A DataLoader that yields only this rank's batches, already on the right device."""

    def __init__(
        self,
        loader: DataLoader,
        *,
        rank: int,
        world_size: int,
        device: torch.device | None,
        gradient_state: GradientState,
        split_batches: bool = False,
        even_batches: bool = True,
        seed: int = 0,
    ) -> None:
        self.base_loader = loader
        self.dataset = loader.dataset
        self.rank, self.world_size, self.device = rank, world_size, device
        self.gradient_state = gradient_state
        self.split_batches, self.even_batches = split_batches, even_batches
        self.seed = seed
        self.epoch = 0
        self._explicit_epoch = False
        self.batches_yielded = 0
        self._skip_next = 0
        self._plan_cache: tuple[int, ShardPlan] | None = None
        self.is_iterable = isinstance(loader.dataset, IterableDataset)
        base_bs = loader.batch_size if loader.batch_size is not None else _batch_size_of(loader)
        self.total_batch_size = base_bs if split_batches else (base_bs or 1) * world_size
        self.batch_size = (base_bs // world_size) if (split_batches and base_bs) else base_bs

    # ------------------------------------------------------------------ epochs
    def set_epoch(self, epoch: int) -> None:
        """Use this epoch's shuffle order (Accelerate/torch DistributedSampler semantics)."""
        self.epoch = int(epoch)
        self._explicit_epoch = True

    def _global_batches(self, epoch: int) -> list[list[int]]:
        loader = self.base_loader
        batch_sampler = loader.batch_sampler
        if isinstance(batch_sampler, BatchSampler) and isinstance(batch_sampler.sampler, RandomSampler):
            base = batch_sampler.sampler
            generator = torch.Generator().manual_seed(self.seed + epoch)
            sampler = RandomSampler(
                base.data_source,
                replacement=base.replacement,
                num_samples=base._num_samples,
                generator=generator,
            )
            batch_sampler = BatchSampler(sampler, batch_sampler.batch_size, batch_sampler.drop_last)
        else:
            inner = getattr(batch_sampler, "sampler", batch_sampler)
            if hasattr(inner, "set_epoch"):
                inner.set_epoch(epoch)
        return [list(b) for b in batch_sampler]

    def plan(self, epoch: int | None = None) -> ShardPlan:
        epoch = self.epoch if epoch is None else epoch
        if self._plan_cache is None or self._plan_cache[0] != epoch:
            bs = self.base_loader.batch_sampler
            plan = plan_epoch(
                self._global_batches(epoch),
                rank=self.rank,
                world_size=self.world_size,
                batch_size=getattr(bs, "batch_size", None) or self.base_loader.batch_size or 1,
                split_batches=self.split_batches,
                even_batches=self.even_batches,
                drop_last=bool(getattr(bs, "drop_last", False)),
            )
            self._plan_cache = (epoch, plan)
        return self._plan_cache[1]

    def __len__(self) -> int:
        if self.is_iterable:
            return len(self.base_loader) // self.world_size
        return len(self.plan().batches)

    # --------------------------------------------------------------- iteration
    def __iter__(self) -> Iterator[Any]:
        if self.is_iterable:
            yield from self._iter_iterable()
            return
        plan = self.plan()
        skip, self._skip_next = self._skip_next, 0
        batches = plan.batches[skip:]
        kwargs = self._loader_kwargs()
        # A private generator: creating the iterator must not draw from the global RNG, or a resumed
        # run (RNG restored, iterator created afterwards) would drift from the uninterrupted one.
        kwargs["generator"] = self.base_loader.generator or torch.Generator().manual_seed(
            self.seed + self.epoch
        )
        loader = DataLoader(self.dataset, batch_sampler=_FixedBatches(batches), **kwargs)
        total = len(plan.batches)
        self.batches_yielded = skip
        self.gradient_state.loaders.append(self)
        last_emit = 0.0
        try:
            for index, batch in enumerate(loader, start=skip + 1):
                is_last = index == total
                self._mark_position(is_last, plan)
                self.batches_yielded = index
                now = time.monotonic()
                if telemetry.has_sink() and (is_last or now - last_emit > _PROGRESS_EVERY_S):
                    telemetry.emit("progress", step=index, total=total, epoch=self.epoch)
                    last_emit = now
                yield send_to_device(batch, self.device) if self.device is not None else batch
            self._end_epoch()
        finally:
            self._leave()

    def _iter_iterable(self) -> Iterator[Any]:
        self.gradient_state.loaders.append(self)
        try:
            mine = (b for i, b in enumerate(self.base_loader) if i % self.world_size == self.rank)
            current = next(mine, _END)
            while current is not _END:
                following = next(mine, _END)
                self.gradient_state.end_of_dataloader = following is _END
                self.gradient_state.remainder = -1
                yield send_to_device(current, self.device) if self.device is not None else current
                current = following
            self._end_epoch()
        finally:
            self._leave()

    def _mark_position(self, is_last: bool, plan: ShardPlan) -> None:
        state = self.gradient_state
        state.end_of_dataloader = is_last
        padded = (
            is_last
            and plan.last_round_real is not None
            and plan.last_round_real < (plan.last_round_size or 0)
        )
        state.remainder = plan.last_round_real if padded else -1
        state.round_size = plan.last_round_size if padded else -1

    def _end_epoch(self) -> None:
        self.batches_yielded = 0
        if not self._explicit_epoch:
            self.epoch += 1
        self._explicit_epoch = False

    def _leave(self) -> None:
        if self in self.gradient_state.loaders:
            self.gradient_state.loaders.remove(self)
        if not self.gradient_state.loaders:
            self.gradient_state.end_of_dataloader = False
            self.gradient_state.remainder = -1

    def _loader_kwargs(self) -> dict[str, Any]:
        base = self.base_loader
        kwargs = {key: getattr(base, key) for key in _LOADER_KEYS if hasattr(base, key)}
        if base.num_workers > 0 and getattr(base, "prefetch_factor", None) is not None:
            kwargs["prefetch_factor"] = base.prefetch_factor
        if base.num_workers == 0:
            kwargs.pop("persistent_workers", None)
        return kwargs

    # ----------------------------------------------------------- checkpointing
    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "batches_yielded": self.batches_yielded, "seed": self.seed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Resume where the saved loader was: same epoch order, skipping the batches already seen."""
        self.epoch = int(state["epoch"])
        self.seed = int(state.get("seed", self.seed))
        self._skip_next = int(state.get("batches_yielded", 0))
        self._explicit_epoch = False
        self._plan_cache = None

    def skip_first_batches(self, num_batches: int) -> DataLoaderShard:
        """Make the next iteration start after `num_batches` batches (Accelerate's helper)."""
        self._skip_next = int(num_batches)
        return self


_END = object()


def _batch_size_of(loader: DataLoader) -> int | None:
    return getattr(loader.batch_sampler, "batch_size", None)
