"""Accelerate's `rng_types`: random generators made identical on every rank at each epoch start.

`Accelerator(rng_types=["torch"])` copies rank 0's global torch RNG state to every rank each time
a prepared data loader starts an epoch, so random operations in the training loop (augmentations,
dropout masks drawn on the CPU) agree across ranks; "cuda" does the same for the current GPU's
generator. "generator" (Accelerate's default) is the data loader's own shuffling generator: here
every prepared loader already shuffles from one seed agreed by all ranks, so it always holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch
import torch.distributed as dist

from ..errors import AcceleratorError
from .data import DataLoaderShard

RNG_TYPES = ("torch", "cuda", "generator")


def check_rng_types(rng_types: Iterable[Any] | None, device: torch.device) -> list[str]:
    """The RNGs to synchronise besides the loader's own ("generator"), validated: [] for none."""
    if rng_types is None:
        return []
    if isinstance(rng_types, str):
        rng_types = [rng_types]
    names = [str(getattr(kind, "value", kind)).lower() for kind in rng_types]
    for name in names:
        if name not in RNG_TYPES:
            raise AcceleratorError(
                f"rng_types contains {name!r}; the random generators that can be synchronised here are "
                f"{', '.join(repr(t) for t in RNG_TYPES)}."
            )
    if "cuda" in names and device.type != "cuda":
        raise AcceleratorError(
            f"rng_types=['cuda'] synchronises the GPU's generator, but this process runs on {device.type!r}; "
            "use rng_types=['torch'] (the CPU generator) here."
        )
    return [name for name in names if name != "generator"]


def synchronize_rng_states(rng_types: list[str], device: torch.device) -> None:
    """Give every rank rank 0's state of each listed generator (a collective: all ranks call it)."""
    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return
    on_device = dist.get_backend() == "nccl"  # NCCL only moves GPU tensors
    for name in rng_types:
        state = torch.get_rng_state() if name == "torch" else torch.cuda.get_rng_state(device)
        shipped = state.to(device) if on_device else state.clone()
        dist.broadcast(shipped, src=0)
        state = shipped.cpu()
        if name == "torch":
            torch.set_rng_state(state)
        else:
            torch.cuda.set_rng_state(state, device)


class RNGSyncedLoader(DataLoaderShard):
    """A prepared loader that synchronises the chosen generators before each epoch, as Accelerate's
    DataLoaderShard does with rng_types."""

    def __init__(self, *args: Any, rng_types: list[str], rng_device: torch.device, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rng_types = rng_types
        self.rng_device = rng_device

    def __iter__(self) -> Iterator[Any]:
        synchronize_rng_states(self.rng_types, self.rng_device)
        yield from super().__iter__()
