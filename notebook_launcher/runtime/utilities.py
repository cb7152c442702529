"""Small helpers `accelerate.utils` users call directly: a barrier, unwrapping a model, patching or
clearing the environment for a block, and checks for optional packages."""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Iterator
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn

from ..config.env import patched_environ


def wait_for_everyone() -> None:
    """A barrier across all processes (nothing in a single process)."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def extract_model_from_parallel(
    model: nn.Module, keep_fp32_wrapper: bool = True, keep_torch_compile: bool = True
) -> nn.Module:
    """The user's module inside DistributedDataParallel (and torch.compile unless keep_torch_compile)."""
    compiled = model if hasattr(model, "_orig_mod") else None
    inner = cast(nn.Module, model._orig_mod) if compiled is not None else model  # the compiled one's module
    while isinstance(inner, nn.parallel.DistributedDataParallel):
        inner = inner.module
    if not keep_fp32_wrapper:
        from .precision.mixed import Precision

        Precision.unwrap_forward(inner)
    if compiled is not None and keep_torch_compile:
        compiled._orig_mod = inner
        return compiled
    return inner


@contextlib.contextmanager
def patch_environment(**kwargs: Any) -> Iterator[None]:
    """Set upper-cased environment variables for the block, then restore exactly what was there."""
    with patched_environ({key.upper(): str(value) for key, value in kwargs.items()}):
        yield


@contextlib.contextmanager
def clear_environment() -> Iterator[None]:
    """Accelerate's: the block runs with an empty os.environ (e.g. to read settings from variables it
    sets itself, with nothing inherited); every variable is back as it was afterwards."""
    saved = dict(os.environ)
    os.environ.clear()
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def is_deepspeed_available() -> bool:
    """DeepSpeed is installed (checked without importing it: its import is slow)."""
    return _installed("deepspeed")


def is_torchao_available() -> bool:
    """torchao (mixed_precision='fp8') is installed, checked without importing it."""
    return _installed("torchao")


def is_cuda_available() -> bool:
    """torch sees a CUDA device (torch.cuda.is_available())."""
    return torch.cuda.is_available()


def is_bf16_available(ignore_tpu: bool = False) -> bool:
    """bf16 runs here: on CPU always; on CUDA when the GPU supports it."""
    if torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    return True
