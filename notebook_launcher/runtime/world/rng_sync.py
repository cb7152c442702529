"""Accelerate's `rng_types` and `synchronize_rng_states`: random generators made identical on every
rank at each epoch start (prepared loaders call it before each pass).

`Accelerator(rng_types=["torch"])` copies rank 0's global torch RNG state to every rank each time
a prepared data loader starts an epoch, so random operations in the training loop (augmentations,
dropout masks drawn on the CPU) agree across ranks; "cuda" does the same for the current GPU's
generator. "generator" (Accelerate's default) is the data loader's own shuffling generator: here
every prepared loader already shuffles from one seed agreed by all ranks, so it always holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import torch
import torch.distributed as dist

from ...errors import AcceleratorError

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


def synchronize_rng_state(rng_type: str, generator: torch.Generator | None = None) -> None:
    """Overwrite this process's `rng_type` state with process 0's (a broadcast; all ranks must call)."""
    rng_type = str(getattr(rng_type, "value", rng_type)).lower()
    if rng_type == "cuda" and not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return
    if rng_type == "generator" and generator is None:
        return
    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return
    if rng_type == "torch":
        state = torch.get_rng_state()
    elif rng_type == "cuda":
        state = torch.cuda.get_rng_state()
    elif rng_type == "generator":
        state = cast(torch.Generator, generator).get_state()  # not None: returned above
    else:
        raise AcceleratorError(f"rng_type={rng_type!r} cannot be synchronised; use one of {RNG_TYPES}.")
    on_gpu = dist.get_backend() == "nccl"
    shared = state.cuda() if on_gpu else state.clone()
    dist.broadcast(shared, src=0)
    shared = shared.cpu()
    if rng_type == "torch":
        torch.set_rng_state(shared)
    elif rng_type == "cuda":
        torch.cuda.set_rng_state(shared)
    else:
        cast(torch.Generator, generator).set_state(shared)


def synchronize_rng_states(rng_types: Iterable[Any], generator: torch.Generator | None = None) -> None:
    """Every rank takes rank 0's state of each RNG named in `rng_types` (synchronize_rng_state each)."""
    for rng_type in rng_types:
        synchronize_rng_state(rng_type, generator)
