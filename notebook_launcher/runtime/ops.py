"""Collectives on nested structures of tensors: gather, reduce, broadcast, pad, move to device.

Every function is a no-op-shaped identity in a single process, so user code needs no branches.
`gather` also accepts tensors whose first dimension differs between ranks (it pads, gathers,
then trims), which the plain all_gather does not.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

import torch
import torch.distributed as dist

from .world import debug_mode


def _is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def recursively_apply(fn: Callable[[torch.Tensor], Any], data: Any) -> Any:
    """Apply fn to every tensor inside lists, tuples, namedtuples and dicts; keep the structure."""
    if isinstance(data, torch.Tensor):
        return fn(data)
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(recursively_apply(fn, v) for v in data))
    if isinstance(data, (list, tuple)):
        return type(data)(recursively_apply(fn, v) for v in data)
    if isinstance(data, Mapping):
        mapping_type: Any = type(data)  # a concrete mapping class (dict, OrderedDict, ...)
        return mapping_type({k: recursively_apply(fn, v) for k, v in data.items()})
    return data


def send_to_device(data: Any, device: torch.device | str, non_blocking: bool = False) -> Any:
    """Move every tensor in a (nested) batch to the device."""
    device = torch.device(device)

    def move(t: torch.Tensor) -> torch.Tensor:
        return t if t.device == device else t.to(device, non_blocking=non_blocking)

    return recursively_apply(move, data)


def _gather_one(tensor: torch.Tensor) -> torch.Tensor:
    if tensor.ndim == 0:
        tensor = tensor.unsqueeze(0)
    tensor = tensor.contiguous()
    world = dist.get_world_size()
    sizes = torch.tensor([tensor.shape[0]], device=tensor.device)
    all_sizes = [torch.zeros_like(sizes) for _ in range(world)]
    dist.all_gather(all_sizes, sizes)
    lengths = [int(s.item()) for s in all_sizes]
    longest = max(lengths)
    if tensor.shape[0] < longest:
        pad = tensor.new_zeros((longest - tensor.shape[0], *tensor.shape[1:]))
        tensor = torch.cat([tensor, pad], dim=0)
    out = [torch.empty_like(tensor) for _ in range(world)]
    dist.all_gather(out, tensor)
    return torch.cat([t[:n] for t, n in zip(out, lengths, strict=True)], dim=0)


def gather(data: Any) -> Any:
    """Concatenate every rank's tensors along dim 0, in rank order (scalars become 1-D)."""
    if not _is_distributed():
        return recursively_apply(lambda t: t.unsqueeze(0) if t.ndim == 0 else t, data)
    debug_mode.verify("gather", data, skip_first_dim=True)
    return recursively_apply(_gather_one, data)


def gather_object(obj: Any) -> list[Any]:
    """Every rank's picklable object, flattened one level when each rank gave a list (like Accelerate)."""
    if not _is_distributed():
        return list(obj) if isinstance(obj, list) else [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    if all(isinstance(o, list) for o in out):
        return [item for o in out for item in o]
    return out


def reduce(data: Any, reduction: str = "mean", scale: float = 1.0) -> Any:
    """Sum, average or take the maximum of tensors over ranks ('sum', 'mean', 'max'), each rank
    getting the result; then multiplied by scale."""
    if reduction not in ("sum", "mean", "max"):
        raise ValueError(f"reduction={reduction!r} is not valid; use 'sum', 'mean' or 'max'.")

    def one(t: torch.Tensor) -> torch.Tensor:
        out = t.clone()
        if _is_distributed():
            dist.all_reduce(out, op=dist.ReduceOp.MAX if reduction == "max" else dist.ReduceOp.SUM)
            if reduction == "mean":
                out = out / dist.get_world_size()
        return out * scale if scale != 1.0 else out

    debug_mode.verify("reduce", data)
    return recursively_apply(one, data)


def copy_tensor_to_devices(tensor: torch.Tensor | None = None) -> torch.Tensor | None:
    """The tensor one process holds (the others pass None), on every process (Accelerate's helper)."""
    if not _is_distributed():
        return tensor
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else None
    holder = torch.tensor([dist.get_rank() if tensor is not None else -1], device=device)
    dist.all_reduce(holder, op=dist.ReduceOp.MAX)
    source = int(holder.item())
    if source < 0:
        raise ValueError("copy_tensor_to_devices: no process passed a tensor; one process must pass it.")
    meta = [(tuple(tensor.shape), tensor.dtype) if tensor is not None else None]
    dist.broadcast_object_list(meta, src=source)
    shape, dtype = cast("tuple[tuple[int, ...], torch.dtype]", meta[0])  # the source's, broadcast
    out = (
        cast(torch.Tensor, tensor).contiguous()
        if dist.get_rank() == source
        else torch.empty(shape, dtype=dtype, device=device)
    )
    dist.broadcast(out, src=source)
    return out


def broadcast(data: Any, from_process: int = 0) -> Any:
    """Every rank receives `from_process`'s tensors (shapes must match)."""
    if not _is_distributed():
        return data
    debug_mode.verify("broadcast", data)

    def one(t: torch.Tensor) -> torch.Tensor:
        out = t.contiguous().clone()
        dist.broadcast(out, src=from_process)
        return out

    return recursively_apply(one, data)


def broadcast_object_list(objects: list[Any], from_process: int = 0) -> list[Any]:
    """Fill `objects` in place with `from_process`'s picklable objects."""
    if _is_distributed():
        dist.broadcast_object_list(objects, src=from_process)
    return objects


def pad_across_processes(data: Any, dim: int = 0, pad_index: int = 0, pad_first: bool = False) -> Any:
    """Pad tensors along `dim` to the largest size any rank has, so they can be gathered."""
    if not _is_distributed():
        return data
    debug_mode.verify("pad_across_processes", data, skip_dim=dim)

    def one(t: torch.Tensor) -> torch.Tensor:
        if t.ndim == 0 or dim >= t.ndim:
            return t
        size = torch.tensor([t.shape[dim]], device=t.device)
        sizes = [torch.zeros_like(size) for _ in range(dist.get_world_size())]
        dist.all_gather(sizes, size)
        longest = max(int(s.item()) for s in sizes)
        if t.shape[dim] == longest:
            return t
        shape = list(t.shape)
        shape[dim] = longest
        out = t.new_full(shape, pad_index)
        index = [slice(None)] * t.ndim
        index[dim] = slice(longest - t.shape[dim], longest) if pad_first else slice(0, t.shape[dim])
        out[tuple(index)] = t
        return out

    return recursively_apply(one, data)


def convert_to_fp32(data: Any) -> Any:
    """Half-precision floating tensors back to float32 (what mixed-precision forwards return)."""
    return recursively_apply(lambda t: t.float() if t.dtype in (torch.float16, torch.bfloat16) else t, data)


def concatenate(data: list[Any], dim: int = 0) -> Any:
    """Join a list of same-structured (nested) tensors along `dim`."""
    first = data[0]
    if isinstance(first, (list, tuple)):
        return type(first)(concatenate([d[i] for d in data], dim=dim) for i in range(len(first)))
    if isinstance(first, Mapping):
        mapping_type: Any = type(first)  # a concrete mapping class (dict, OrderedDict, ...)
        return mapping_type({k: concatenate([d[k] for d in data], dim=dim) for k in first})
    if not isinstance(first, torch.Tensor):
        raise TypeError(
            f"concatenate can only join tensors (or lists/dicts of tensors); got {type(first).__name__}."
        )
    return torch.cat(data, dim=dim)
