"""safetensors files for `save(..., safe_serialization=True)`: tensors only, no pickle inside.

Accelerate writes `safetensors.torch.save_file(obj, f, metadata={"format": "pt"})`; so do we. The
format holds a flat dict of named tensors, so anything else is refused with the fix, and tensors
that share memory (tied weights) are written as separate copies instead of failing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch

from ...errors import AcceleratorError


def save_safetensors(obj: Any, path: str | os.PathLike[str]) -> None:
    """Write a {name: tensor} mapping as a safetensors file (contiguous CPU copies)."""
    try:
        from safetensors.torch import save_file
    except ImportError:
        raise AcceleratorError(
            "save(..., safe_serialization=True) needs the safetensors package: `pip install safetensors`, or "
            "save with safe_serialization=False (torch.save)."
        ) from None
    if not isinstance(obj, Mapping) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj.items()
    ):
        kind = type(obj).__name__
        raise AcceleratorError(
            f"save(..., safe_serialization=True) writes a safetensors file, which holds a dict of named tensors "
            f"only; got {kind}{_first_bad_entry(obj)}. Save a state dict (e.g. accelerator.get_state_dict(model)), "
            "or use safe_serialization=False (torch.save) for other objects."
        )
    tensors = {name: _own_storage(tensor) for name, tensor in obj.items()}
    save_file(tensors, str(path), metadata={"format": "pt"})


def _own_storage(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous CPU tensor with storage of its own (safetensors refuses shared or strided ones)."""
    return tensor.detach().to("cpu").contiguous().clone()


def _first_bad_entry(obj: Any) -> str:
    if not isinstance(obj, Mapping):
        return ""
    for key, value in obj.items():
        if not isinstance(key, str):
            return f" with the key {key!r} (not a string)"
        if not isinstance(value, torch.Tensor):
            return f" whose entry {key!r} is a {type(value).__name__}, not a tensor"
    return ""
