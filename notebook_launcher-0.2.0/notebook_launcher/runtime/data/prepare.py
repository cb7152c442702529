"""Accelerate's `prepare_data_loader(dataloader, device, num_processes, process_index, ...)`: a loader
prepared without an Accelerator, with the same arguments and meaning (an Accelerator's prepare() calls
the same DataLoaderShard)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import DataLoader

from ...errors import AcceleratorError
from .gradient_state import GradientState
from .loader import DataLoaderShard


def prepare_data_loader(
    dataloader: DataLoader,
    device: torch.device | str | None = None,
    num_processes: int | None = None,
    process_index: int | None = None,
    split_batches: bool = False,
    put_on_device: bool = False,
    rng_types: list[str] | None = None,
    dispatch_batches: bool | None = None,
    even_batches: bool = True,
    slice_fn_for_dispatch: Callable[..., Any] | None = None,
    use_seedable_sampler: bool = False,
    data_seed: int | None = None,
    non_blocking: bool = False,
    use_stateful_dataloader: bool = False,
    torch_device_mesh: Any = None,
) -> DataLoaderShard:
    """This process's share of `dataloader` (num_processes/process_index default to this run's)."""
    if slice_fn_for_dispatch is not None or torch_device_mesh is not None:
        raise AcceleratorError(
            "prepare_data_loader(slice_fn_for_dispatch=..., torch_device_mesh=...) is not supported: "
            "batches are cut along their first dimension, and one data-parallel mesh is assumed."
        )
    if dispatch_batches and not put_on_device:
        raise ValueError("Using `dispatch_batches=True` requires `put_on_device=True`.")
    if num_processes is None or process_index is None:
        from ..world.shared_state import PartialState

        state = PartialState()
        num_processes = state.num_processes if num_processes is None else num_processes
        process_index = state.process_index if process_index is None else process_index
    seed = data_seed if data_seed is not None else torch.initial_seed() % 2**31
    return DataLoaderShard(
        dataloader,
        rank=process_index,
        world_size=num_processes,
        device=torch.device(device) if put_on_device and device is not None else None,
        gradient_state=GradientState(),
        split_batches=split_batches,
        even_batches=even_batches,
        seed=int(seed),
        dispatch_batches=dispatch_batches if dispatch_batches is not None else None,
        non_blocking=non_blocking,
        rng_types=rng_types,
        use_seedable_sampler=use_seedable_sampler,
        data_seed=data_seed,
    )
