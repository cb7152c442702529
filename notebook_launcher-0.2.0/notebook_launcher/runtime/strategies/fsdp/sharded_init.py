"""Shard a model that was built (partly) on the meta device, then fill only this rank's shards.

The full model is never materialised on a rank that did not build it: every parameter goes to
the meta device, `fully_shard` shards the empty model (allocating nothing), `to_empty` allocates
just the local shards, and then

- from rank 0's real copy ("rank0"): for each parameter in turn, rank 0 scatters the pieces of its
  full tensor (torch's `distribute_tensor`); rank 0 drops each full tensor once it is sent, so it
  never holds more than its copy plus its own shards;
- with nothing to copy ("none"): each module's `reset_parameters()`, children first. On a CPU
  mesh torch draws a DTensor's random values from the local generator, so every rank would draw
  the same numbers for its shard; each rank's generator is therefore seeded apart while it runs.

Buffers are replicated, not sharded: the real ones survive `to_empty`, and every rank then takes
rank 0's (exactly what a broadcast of module states does).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor, distribute_tensor

from .. import materialize as mat

_SEED_STRIDE = 1_000_003


def shard_and_fill(
    model: nn.Module,
    shard: Callable[[], None],
    source: str,
    *,
    device: torch.device,
    offload: bool,
    rank: int,
) -> str | None:
    """Shard `model` with `shard()` and fill its local shards from `source`; returns a note for the
    user when some tensors could not be initialised (NONE with modules lacking reset_parameters)."""
    buffers = mat.real_buffers(model)
    owners = mat.meta_parameter_owners(model) if source == mat.NONE else set()
    full = {name: p.detach() for name, p in model.named_parameters() if not p.is_meta} if rank == 0 else {}
    sent = _names_from_rank0(sorted(full))
    mat.parameters_to_meta(model)  # shard nothing real: each rank allocates only its own shards
    shard()
    model.to_empty(device=torch.device("cpu") if offload else device)
    meta_born = mat.restore_buffers(model, buffers)
    mat.broadcast_buffers(model)
    _fill_from_rank0(model, full, set(sent), rank)
    without: list[str] = []
    if owners:
        without = _reset_apart(model, owners, device, rank)
    return mat.describe_uninitialised(without, meta_born if source == mat.NONE else [])


def _names_from_rank0(names: list[str]) -> list[str]:
    """The parameter names rank 0 has real values for, on every rank."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return names
    box = [names]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _fill_from_rank0(model: nn.Module, full: dict[str, torch.Tensor], names: set[str], rank: int) -> None:
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name not in names:
                continue
            if isinstance(param, DTensor):
                mesh = param.device_mesh
                if rank == 0:
                    tensor = full.pop(name).to(device=mesh.device_type, dtype=param.dtype)
                else:
                    tensor = torch.empty(param.shape, dtype=param.dtype, device=mesh.device_type)
                # scatters rank 0's pieces (and broadcasts along replicated mesh dimensions)
                local = distribute_tensor(tensor, mesh, param.placements).to_local()
                param.to_local().copy_(local)
                del tensor, local
            else:
                if rank == 0:
                    param.copy_(full.pop(name))
                if dist.is_initialized() and dist.get_world_size() > 1:
                    dist.broadcast(param.data, src=0)


def _reset_apart(model: nn.Module, owners: set[int], device: torch.device, rank: int) -> list[str]:
    """reset_parameters() on the local shards, each rank's CPU generator seeded apart."""
    cpu_mesh = device.type == "cpu"
    with torch.random.fork_rng(devices=[]):
        if cpu_mesh:
            torch.manual_seed((torch.initial_seed() + _SEED_STRIDE * (rank + 1)) % 2**63)
        return mat.reset_modules(model, owners)
