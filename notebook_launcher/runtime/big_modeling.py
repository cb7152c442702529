"""Build a model without its weights: Accelerate's `init_empty_weights` / `init_on_device`.

Under `init_empty_weights()` every parameter a module registers goes to the meta device: it has a
shape and a dtype but no memory, so building even a model that would not fit costs nothing.
`accelerator.prepare` then shards such a model and materialises only this rank's part (see
`runtime/strategies/fsdp/materialize.py` and `runtime/strategies/deepspeed/materialize.py`).

Same names, arguments and meaning as `accelerate.init_empty_weights`: buffers stay real unless
`include_buffers=True` (or the environment variable ACCELERATE_INIT_INCLUDE_BUFFERS is true),
because buffers are small and often computed (a causal mask) rather than learned. As in
Accelerate, a module's `torch.empty` weight is allocated for a moment before it moves to the meta
device: never written, so it never becomes resident (the largest single parameter must fit in
virtual memory).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any, cast

import torch
from torch import nn

_TRUE = ("1", "true", "yes", "on")


def _include_buffers_default() -> bool:
    return os.environ.get("ACCELERATE_INIT_INCLUDE_BUFFERS", "").strip().lower() in _TRUE


@contextlib.contextmanager
def init_on_device(device: torch.device | str, include_buffers: bool | None = None) -> Iterator[None]:
    """Create every parameter registered inside the block on `device` (buffers too if asked)."""
    device = torch.device(device)
    if include_buffers is None:
        include_buffers = _include_buffers_default()
    if include_buffers:
        with device:  # torch's own default-device context: every new tensor lands there
            yield
        return
    original = nn.Module.register_parameter

    def register_on_device(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        original(module, name, param)
        if param is None:
            return
        registered = cast(nn.Parameter, module._parameters[name])  # just registered, not None
        extra = dict(registered.__dict__)  # attributes set on the parameter object (e.g. by a library)
        moved = type(registered)(registered.to(device), requires_grad=registered.requires_grad)
        moved.__dict__.update(extra)
        module._parameters[name] = moved

    patched: Any = nn.Module  # the class whose method is swapped (mypy forbids assigning to a method)
    patched.register_parameter = register_on_device
    try:
        yield
    finally:
        patched.register_parameter = original


@contextlib.contextmanager
def init_empty_weights(include_buffers: bool | None = None) -> Iterator[None]:
    """A model built inside this block has its parameters on the meta device (no memory).

    `accelerator.prepare(model)` shards it and materialises only this rank's shard: with the
    weights of rank 0's real copy when rank 0 built one (see `Accelerator.sharded_init`), else
    with each module's `reset_parameters()`; `accelerator.load_state(folder)` then loads a
    checkpoint into the shards, each rank reading only its part.
    """
    with init_on_device(torch.device("meta"), include_buffers=include_buffers):
        yield


def has_meta_tensors(model: nn.Module) -> bool:
    """True when any parameter or buffer of the model is on the meta device (not materialised)."""
    return any(t.is_meta for t in [*model.parameters(), *model.buffers()])
