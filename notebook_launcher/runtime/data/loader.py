"""Prepared data loaders: each rank gets its shard, all ranks shuffle alike, positions can be saved.

`DataLoaderShard` keeps the user's dataset, collate_fn and worker settings and replaces only the
choice of indices (see index_plan.py). The order comes from the user's own sampler and generator,
as in Accelerate (samplers.py: rank 0's generator state on every rank at each pass, or a seedable
sampler's seed + epoch), so every rank sees the same permutation and every epoch a new one. With dispatch_batches (the
default for an IterableDataset) only rank 0 reads the data and sends each rank its slice
(dispatch.py); without it every rank reads the stream and keeps its share of each round
(stream_plan.py, stream_reader.py: Accelerate's IterableDatasetShard). Each pass starts by
synchronising the Accelerator's rng_types.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterable, Iterator, Sized
from typing import Any, cast

import torch
from torch.utils.data import DataLoader, IterableDataset, Sampler

from .. import memory_phases, telemetry
from ..checkpointing.periodic import with_periodic_saves
from ..ops import send_to_device
from ..world import step_clock
from ..world.rng_sync import synchronize_rng_states
from .dispatch import dispatch
from .gradient_state import GradientState
from .index_plan import ShardPlan, plan_epoch
from .samplers import BatchSamplerShard, adopt_batch_sampler, count_batches, sampler_of, shared_generator
from .stream_plan import StreamStep, round_shape, shard_stream, steps_in_stream
from .stream_reader import StreamReader

_LOADER_KEYS: tuple[str, ...] = ("num_workers", "collate_fn", "pin_memory", "timeout", "worker_init_fn")
_LOADER_KEYS += ("multiprocessing_context", "persistent_workers")
_PROGRESS_EVERY_S = 0.25


class FixedBatches(Sampler[list[int]]):
    """A batch sampler over a list of batches decided beforehand (this rank's plan, or a skip)."""

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
        dispatch_batches: bool | None = None,
        non_blocking: bool = False,
        rng_types: list[str] | None = None,
        use_seedable_sampler: bool = False,
        data_seed: int | None = None,
        process_index: int | None = None,
    ) -> None:
        self.base_loader = loader
        self.process_index = rank if process_index is None else process_index  # dispatch reads on 0
        self._dispatch_group: Any = None  # whom a dispatched batch goes to (None: all; stage_batches.py)
        self.dataset = loader.dataset
        self.use_seedable_sampler = use_seedable_sampler
        self.rank, self.world_size, self.device = rank, world_size, device
        self.gradient_state = gradient_state
        self.split_batches, self.even_batches = split_batches, even_batches
        self.seed = seed
        self.epoch = 0
        self.batches_yielded = 0
        self.periodic_saves: Any = None  # set by the Accelerator for save_every_n_steps
        self._skip_next = 0
        self._plan_cache: tuple[int, ShardPlan] | None = None
        self.is_iterable = isinstance(loader.dataset, IterableDataset)
        self.dispatch_batches = self.is_iterable if dispatch_batches is None else bool(dispatch_batches)
        self.non_blocking = non_blocking
        self.rng_types = list(rng_types) if rng_types is not None else None
        self.end_of_dataloader = False
        self.remainder = -1
        self._stream = StreamReader(loader) if self.is_iterable and not self.dispatch_batches else None
        self._sampling: Any = (  # the loader's batch sampler (any object yielding index lists)
            None
            if self.is_iterable
            else adopt_batch_sampler(
                loader,
                world_size=world_size,
                seed=seed,
                use_seedable_sampler=use_seedable_sampler,
                data_seed=data_seed,
            )
        )
        self._shared_generator = shared_generator(self._sampling)
        self._pass_generator_state: torch.Tensor | None = None
        self._restore_generator_state: torch.Tensor | None = None
        self._batch_sampler_view = BatchSamplerShard(self, self._sampling)
        if self._stream is not None:  # a bad split_batches size: reported at prepare(), not at a step
            round_shape(world_size, loader.batch_size, split_batches)
        base_bs = (
            loader.batch_size
            if loader.batch_size is not None
            else getattr(loader.batch_sampler, "batch_size", None)
        )
        self.total_batch_size = base_bs if split_batches else (base_bs or 1) * world_size
        self.batch_size = (base_bs // world_size) if (split_batches and base_bs) else base_bs

    # ------------------------------------------------------------------ epochs
    def set_epoch(self, epoch: int) -> None:
        """Use this epoch's shuffle order (Accelerate/torch DistributedSampler semantics)."""
        self.epoch = int(epoch)
        inner = sampler_of(self._sampling)
        if hasattr(inner, "set_epoch"):
            inner.set_epoch(self.epoch)

    @property
    def batch_sampler(self) -> BatchSamplerShard:
        """Accelerate's `prepared.batch_sampler`: `.batch_sampler` is the original, `.even_batches` settable."""
        return self._batch_sampler_view

    def _global_batches(self, epoch: int) -> list[list[int]]:
        """The original loader's batches for this pass, drawn from its own sampler (and generator)."""
        inner = sampler_of(self._sampling)
        if hasattr(inner, "set_epoch"):
            inner.set_epoch(epoch)
        return [list(b) for b in self._sampling]

    def plan(self, epoch: int | None = None) -> ShardPlan:
        """This rank's batches: those of the pass under way, else drawn now."""
        epoch = self.epoch if epoch is None else epoch
        if self._plan_cache is None or self._plan_cache[0] != epoch:
            self._plan_cache = (epoch, self._plan_of(self._global_batches(epoch)))
        return self._plan_cache[1]

    def _plan_of(self, global_batches: list[list[int]]) -> ShardPlan:
        bs = self._sampling
        return plan_epoch(
            global_batches,
            rank=self.rank,
            world_size=self.world_size,
            batch_size=getattr(bs, "batch_size", None) or self.base_loader.batch_size or 1,
            split_batches=self.split_batches,
            even_batches=self.even_batches,
            drop_last=bool(getattr(bs, "drop_last", False)),
        )

    def _start_planned_pass(self) -> torch.Generator | None:
        """Draw this pass's order as the original loader would: rank 0's generator state on every rank
        (or the checkpoint's), the DataLoader's base seed, then the sampler. Returns the generator for
        the inner DataLoader's worker seeds."""
        shared = self._shared_generator
        if shared is not None:
            synchronize_rng_states(["generator"], shared)
            if self._restore_generator_state is not None:
                shared.set_state(self._restore_generator_state)
            self._pass_generator_state = shared.get_state()
        self._restore_generator_state = None
        own = self.base_loader.generator
        if own is None:  # a private generator: creating the iterator must not draw from the global RNG
            return torch.Generator().manual_seed(self.seed + self.epoch)
        base_seed = int(torch.empty((), dtype=torch.int64).random_(generator=own).item())
        return torch.Generator().manual_seed(base_seed)

    def __len__(self) -> int:
        if self._stream is not None:
            try:
                length = len(cast(Sized, self.dataset))  # no __len__: TypeError, caught
            except TypeError as exc:
                raise TypeError(
                    f"{exc}: this prepared DataLoader reads a stream (an IterableDataset) without "
                    "__len__, so its number of steps is known only at its end; define __len__ on the "
                    "dataset to get len()."
                ) from None
            return self._stream_steps(length)
        if self.is_iterable or self.dispatch_batches:
            per_step = 1 if self.split_batches else self.world_size
            full, extra = divmod(len(self.base_loader), per_step)
            return full + (1 if extra and not self._drop_last else 0)
        if self._plan_cache is None or self._plan_cache[0] != self.epoch:
            counted = count_batches(self._sampling)  # len() draws from no generator
            if counted is not None:
                return len(self._plan_of(counted).batches)
        return len(self.plan().batches)

    def _stream_steps(self, length: int) -> int:
        return steps_in_stream(length, **self._stream_shape)

    @property
    def _stream_shape(self) -> dict[str, Any]:
        """How this rank takes its steps from a stream: what len() and the iteration both follow."""
        return dict(
            rank=self.rank,
            world_size=self.world_size,
            batch_size=self.base_loader.batch_size,
            split_batches=self.split_batches,
            even_batches=self.even_batches,
            drop_last=self._drop_last,
        )

    @property
    def _drop_last(self) -> bool:
        return bool(getattr(self.base_loader, "drop_last", False))

    # --------------------------------------------------------------- iteration
    def __iter__(self) -> Iterator[Any]:
        if not step_clock.CLOCK.enabled:
            return self._batches()
        return _timed(self._batches())

    def _batches(self) -> Generator[Any, None, None]:
        if self.rng_types:
            synchronize_rng_states(self.rng_types, self._synchronized_generator())
        self._begin()
        try:
            if self.dispatch_batches:
                batches = self._iter_dispatched()
            else:
                batches = self._iter_iterable() if self.is_iterable else self._iter_planned()
            yield from with_periodic_saves(batches, self.periodic_saves)
            self._end_epoch()
        finally:
            self._leave()

    def _iter_planned(self) -> Iterator[Any]:
        kwargs = self._loader_kwargs()
        kwargs["generator"] = self._start_planned_pass()
        plan = self._plan_of(self._global_batches(self.epoch))
        self._plan_cache = (self.epoch, plan)
        skip, self._skip_next = self._skip_next, 0
        batches = plan.batches[skip:]
        loader = self._batch_loader(batches, kwargs)
        total = len(plan.batches)
        self.batches_yielded = skip
        last_emit = 0.0
        for index, batch in enumerate(loader, start=skip + 1):
            self.end_of_dataloader = index == total
            self.batches_yielded = index
            now = time.monotonic()
            if telemetry.has_sink() and (self.end_of_dataloader or now - last_emit > _PROGRESS_EVERY_S):
                telemetry.emit("progress", step=index, total=total, epoch=self.epoch)
                last_emit = now
            yield self._to_device(batch)

    def _batch_loader(self, batches: list[list[int]], kwargs: dict[str, Any]) -> Iterable[Any]:
        """This pass's batches, read from the dataset (a pipeline's middle stages read none: stage_batches.py)."""
        return DataLoader(self.dataset, batch_sampler=FixedBatches(batches), **kwargs)

    def _iter_iterable(self) -> Iterator[Any]:
        """This rank's share of the stream: the same number of steps on every rank (even_batches)."""
        if hasattr(self.dataset, "set_epoch"):  # as Accelerate does: a stream may reshuffle per epoch
            self.dataset.set_epoch(self.epoch)
        stream = cast(StreamReader, self._stream)  # set whenever the dataset is iterable and not dispatched
        skip, self._skip_next = self._skip_next, 0
        steps = shard_stream(stream.items(), size_of=stream.size_of, **self._stream_shape)
        total = _sized(self.dataset, self._stream_steps)
        self.batches_yielded = skip
        last_emit = 0.0
        for index, step in enumerate(steps, start=1):
            if index <= skip:  # resuming: read past the steps already taken, without collating them
                continue
            self._mark_stream_position(step)
            self.batches_yielded = index
            now = time.monotonic()
            if telemetry.has_sink() and (step.last or now - last_emit > _PROGRESS_EVERY_S):
                telemetry.emit("progress", step=index, total=total, epoch=self.epoch)
                last_emit = now
            yield self._to_device(stream.collate(step.items))

    def _mark_stream_position(self, step: StreamStep) -> None:
        """end_of_dataloader on the last step; there, remainder = the genuine samples of the last
        round when even_batches padded it (0 when nothing was repeated), as gather_for_metrics reads it."""
        self.end_of_dataloader = step.last
        if step.last:
            padded = step.real is not None and step.real < (step.size or 0)
            self.remainder = step.real if padded and step.real is not None else 0

    def _iter_dispatched(self) -> Iterator[Any]:
        skip, self._skip_next = self._skip_next, 0
        if hasattr(self.base_loader.sampler, "set_epoch"):
            self.base_loader.sampler.set_epoch(self.epoch)
        parts = dispatch(
            self.base_loader,
            rank=self.rank,
            world_size=self.world_size,
            split_batches=self.split_batches,
            drop_last=self._drop_last,
            reads=self.process_index == 0,
            group=self._dispatch_group,
        )
        for index, part in enumerate(parts, start=1):
            self.end_of_dataloader = part.is_last
            if part.is_last and not self._drop_last:
                self.remainder = part.global_size
            if index > skip:
                self.batches_yielded = index
                yield self._to_device(part.batch)

    def _to_device(self, batch: Any) -> Any:
        if self.device is None:
            return batch
        return send_to_device(batch, self.device, non_blocking=self.non_blocking)

    def _synchronized_generator(self) -> torch.Generator | None:
        """The generator "generator" in rng_types refers to: the dataset's own (a stream that shuffles)
        or the one given to the DataLoader; shuffling of map-style data already uses one agreed seed."""
        generator = getattr(self.dataset, "generator", None)
        if isinstance(generator, torch.Generator):
            return generator
        return self.base_loader.generator

    def _begin(self) -> None:
        """Accelerate's remainder: samples in the last round, known from the start of the pass."""
        self.end_of_dataloader = False
        self.remainder = -1
        if not self._drop_last and not self.is_iterable:
            try:
                self.remainder = len(cast(Sized, self.dataset)) % (self.total_batch_size or 1)
            except TypeError:
                pass
        self.gradient_state._add_dataloader(self)

    def _end_epoch(self) -> None:
        """A whole pass moves to the next epoch (Accelerate: set_epoch(e) makes the next pass e)."""
        self.batches_yielded = 0
        self.epoch += 1

    def _leave(self) -> None:
        self.gradient_state._remove_dataloader(self)

    def _loader_kwargs(self) -> dict[str, Any]:
        base = self.base_loader
        kwargs = {key: getattr(base, key) for key in _LOADER_KEYS if hasattr(base, key)}
        if base.num_workers > 0 and getattr(base, "prefetch_factor", None) is not None:
            kwargs["prefetch_factor"] = base.prefetch_factor
        if base.num_workers == 0:
            kwargs.pop("persistent_workers", None)
        return kwargs

    # ----------------------------------------------------------- checkpointing
    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "epoch": self.epoch,
            "batches_yielded": self.batches_yielded,
            "seed": self.seed,
        }
        if self._pass_generator_state is not None and self.batches_yielded:
            state["generator_state"] = self._pass_generator_state  # the order of the pass under way
        elif self._shared_generator is not None and not self.batches_yielded:
            # between passes: where the next pass's order starts (the uninterrupted run draws it from here)
            state["generator_state"] = self._shared_generator.get_state()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume where the saved loader was: same epoch order, skipping the batches already seen."""
        self.epoch = int(state["epoch"])
        self.seed = int(state.get("seed", self.seed))
        self._skip_next = int(state.get("batches_yielded", 0))
        self._restore_generator_state = state.get("generator_state")
        self._plan_cache = None

    def skip_first_batches(self, num_batches: int) -> DataLoaderShard:
        """Make the next iteration start after `num_batches` batches (Accelerate's helper)."""
        self._skip_next = int(num_batches)
        return self


def _sized(dataset: Any, steps_of) -> int | None:
    """Steps this epoch for a stream that knows its length, else None (progress shows no total)."""
    try:
        return steps_of(len(dataset))
    except TypeError:
        return None


def _timed(batches: Generator[Any, None, None]) -> Iterator[Any]:
    """The same batches, with the time the training loop waited for each one on the step clock."""
    clock = step_clock.CLOCK
    try:
        while True:
            began = time.perf_counter()
            try:
                batch = next(batches)
            except StopIteration:
                memory_phases.phase_ended(rate_limited=True)  # an epoch ended: its garbage goes back
                return
            clock.add("data", time.perf_counter() - began)
            yield batch
    finally:
        batches.close()  # a loop that breaks early ends the epoch's bookkeeping now, as before
