"""Sharded initialisation under DeepSpeed: build with `zero.Init`, or give a meta-device model its
weights while ZeRO-3 partitions it, one parameter at a time.

- `sharded_init_context` is what `accelerator.sharded_init()` enters. ZeRO-3 with
  `zero3_init_flag`: DeepSpeed's `zero.Init`, which partitions each parameter as soon as its module
  is built (after broadcasting rank 0's values, so every rank holds a piece of the same weights).
  ZeRO-3 without it: rank 0 builds the real model, the other ranks build it on the meta device.
  ZeRO-1/2 keep a full copy per rank anyway: nothing special.
- `materialize_for_engine` runs in `prepare`, before `deepspeed.initialize`. A ZeRO-3 model with
  meta parameters and rank 0's real copy is converted with `zero.Init(module=...)`, fed one
  parameter at a time: each gets memory just before DeepSpeed broadcasts rank 0's values into it
  and keeps this rank's partition, so a rank never holds more than one full parameter it did not
  build. Otherwise the meta tensors get memory here (the engine then broadcasts rank 0's
  parameters), or, when no rank has the weights, their modules' `reset_parameters()`.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import nn

from ...big_modeling import init_empty_weights
from .. import materialize as mat


def sharded_init_context(deepspeed: Any, engine_config: Any, is_main_process: bool, zero3_init_flag: bool):
    """The context a model is built in for this DeepSpeed run (see the module docstring)."""
    if engine_config.zero_stage != 3:
        return contextlib.nullcontext()
    if zero3_init_flag:
        join_deepspeed_comm(deepspeed)
        return deepspeed.zero.Init(config_dict_or_path=engine_config.config)
    return contextlib.nullcontext() if is_main_process else init_empty_weights()


UNPARTITIONED_NOTE = (
    "zero3_init_flag is set, but this model was built whole (not inside accelerator.sharded_init() nor by "
    "transformers' from_pretrained), so every rank held all of it until prepare() partitioned it."
)


def join_deepspeed_comm(deepspeed: Any) -> None:
    """Let deepspeed.comm adopt torch's process group (zero.Init reads the world size from it;
    deepspeed.initialize would do the same, later)."""
    if not deepspeed.comm.is_initialized():
        deepspeed.init_distributed(auto_mpi_discovery=False, verbose=False, dist_init_required=False)


def engine_dtype(config: dict[str, Any]) -> torch.dtype | None:
    """The parameter dtype the engine trains in (None: keep the model's)."""
    if config.get("bf16", {}).get("enabled") is True:
        return torch.bfloat16
    if config.get("fp16", {}).get("enabled") is True:
        return torch.float16
    return None


def materialize_for_engine(
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None,
    *,
    deepspeed: Any,
    engine_config: Any,
    device: torch.device,
    zero3_init_flag: bool = False,
) -> str | None:
    """Give a (partly) meta-device model its weights before the engine is built (an optimizer
    created from the empty parameters is re-bound to the real ones); returns a note for the user
    when some tensors could not be initialised."""
    if any(hasattr(p, "ds_id") for p in model.parameters()):
        return None  # built under zero.Init: partitioned already
    replaced: dict[int, nn.Parameter] = {}
    source = mat.weights_source(model, device)
    whole = zero3_init_flag and engine_config.zero_stage == 3 and source == mat.LOCAL
    flag_note = UNPARTITIONED_NOTE if whole else None
    if engine_config.zero_stage == 3 and source == mat.RANK0:
        mat.materialize_buffers(model, device)
        mat.broadcast_buffers(model)
        feeder = _OneParameterAtATime(model, device, engine_dtype(engine_config.config), replaced)
        join_deepspeed_comm(deepspeed)
        deepspeed.zero.Init(module=feeder, config_dict_or_path=engine_config.config)
        note = None
    else:  # a whole copy per rank first (ZeRO-1/2 keep one; with no weights anywhere, reset_parameters)
        note = mat.materialize_whole(model, device, replaced)
    mat.rebind_optimizer(optimizer, replaced)
    return " ".join(n for n in (flag_note, note) if n) or None


class _OneParameterAtATime(nn.Module):
    """What `zero.Init(module=...)` converts: the model's parameters, each given memory (and the
    engine's dtype) only when DeepSpeed reaches it, right before it is broadcast and partitioned."""

    def __init__(
        self, model: nn.Module, device: torch.device, dtype: torch.dtype | None, replaced: dict
    ) -> None:
        super().__init__()
        self._model = [model]  # a list, so the model is not registered as a submodule
        self._device = device
        self._dtype = dtype
        self._replaced = replaced

    def parameters(self, recurse: bool = True):
        return mat.materialized_parameters(self._model[0], self._device, self._dtype, self._replaced)
