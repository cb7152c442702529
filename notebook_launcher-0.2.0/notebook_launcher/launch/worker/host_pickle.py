"""Pickling that never ships a GPU tensor between the kernel and the workers.

Every tensor on an accelerator (CUDA, MPS, XPU, ...) is copied to the CPU as it is pickled, so:

- a worker's return value, metrics and exceptions arrive in the kernel as CPU tensors. Unpickling
  a CUDA tensor there would initialise CUDA in the kernel (the next launch could no longer fork)
  and put it on whatever device has that index in the kernel, not the worker's GPU;
- under spawn, CUDA tensors captured by the function or passed as arguments reach every rank on
  the CPU, instead of all being restored onto `cuda:0` (one GPU holding every rank's copy).

The conversion happens in the process that holds the tensor (the worker, or the kernel for spawn
payloads) and keeps the structure around it: a Parameter stays a Parameter, a leaf that requires
grad still does. Imports nothing heavy: torch is looked up only if the process already loaded it.
"""

from __future__ import annotations

import io
import pickle
import sys
from dataclasses import dataclass
from typing import Any

import cloudpickle

_HOST_DEVICE_TYPES = ("cpu", "meta")  # already on the host, or holding no data at all


@dataclass
class MovedTensor:
    """One tensor that was copied to the CPU while pickling."""

    shape: tuple[int, ...]
    device: str
    nbytes: int


def on_accelerator(obj: Any) -> bool:
    """True for a torch tensor whose data lives on a device other than the CPU."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(obj, torch.Tensor):
        return False
    return obj.device.type not in _HOST_DEVICE_TYPES


def host_copy(tensor: Any) -> Any:
    """The tensor's data on the CPU, as the same kind of object (Parameter, leaf requiring grad)."""
    import torch

    host = tensor.detach().to("cpu")
    if isinstance(tensor, torch.nn.Parameter):
        return torch.nn.Parameter(host, requires_grad=tensor.requires_grad)
    if tensor.requires_grad and tensor.is_leaf:
        host.requires_grad_(True)
    return host


class _HostTensors:
    """Pickler mix-in: replace each accelerator tensor by its CPU copy, and remember what moved."""

    def _init_host(self, protocol: int) -> None:
        self.host_protocol = protocol
        self.moved: list[MovedTensor] = []

    def reducer_override(self, obj: Any) -> Any:
        if on_accelerator(obj):
            host = host_copy(obj)
            self.moved.append(MovedTensor(tuple(obj.shape), str(obj.device), host.nbytes))
            return host.__reduce_ex__(self.host_protocol)
        parent = getattr(super(), "reducer_override", None)
        return parent(obj) if parent is not None else NotImplemented


class _PlainHostPickler(_HostTensors, pickle.Pickler):
    def __init__(self, file: Any, protocol: int) -> None:
        super().__init__(file, protocol)
        self._init_host(protocol)


class _CloudHostPickler(_HostTensors, cloudpickle.Pickler):
    def __init__(self, file: Any, protocol: int) -> None:
        super().__init__(file, protocol)
        self._init_host(protocol)


def dumps(obj: Any, *, by_value: bool = True) -> tuple[bytes, list[MovedTensor]]:
    """Pickle obj with every accelerator tensor moved to the CPU; also say which tensors moved.

    by_value=True uses cloudpickle (functions and classes defined in a notebook travel by value);
    False uses the plain pickler (cheaper, for the small messages of the worker's pipe).
    """
    buffer = io.BytesIO()
    pickler_class = _CloudHostPickler if by_value else _PlainHostPickler
    pickler = pickler_class(buffer, pickle.HIGHEST_PROTOCOL)
    pickler.dump(obj)
    return buffer.getvalue(), pickler.moved


def dumps_on_host(obj: Any, *, by_value: bool = True) -> bytes:
    """dumps() without the report: the bytes only."""
    return dumps(obj, by_value=by_value)[0]


class _Discard:
    def write(self, data: bytes) -> int:
        return len(data)


def moves_tensors(obj: Any) -> bool:
    """Whether pickling obj would move any accelerator tensor (pickles into nothing to find out)."""
    pickler = _CloudHostPickler(_Discard(), pickle.HIGHEST_PROTOCOL)
    try:
        pickler.dump(obj)
    except Exception:
        return False
    return bool(pickler.moved)


def describe_moved(moved: list[MovedTensor]) -> str:
    """'3 CUDA tensors (12.0 MB)' — for the note that says what was moved."""
    kinds = sorted({m.device.split(":")[0].upper() for m in moved})
    size = sum(m.nbytes for m in moved) / 1e6
    noun = "tensor" if len(moved) == 1 else "tensors"
    return f"{len(moved)} {'/'.join(kinds)} {noun} ({size:.1f} MB)"
