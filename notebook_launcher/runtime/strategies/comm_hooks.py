"""DDP communication hooks (Accelerate's DistributedDataParallelKwargs comm_hook / comm_wrapper /
comm_state_option): torch's own hooks, registered on the DDP model by prepare().

A hook the device cannot run is refused here with the reason, not left to fail inside backward().
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ...config.enums import DDPCommunicationHookType
from ...errors import AcceleratorError

HOOK_FIELDS = ("comm_hook", "comm_wrapper", "comm_state_option")
_POWER_SGD = (DDPCommunicationHookType.POWER_SGD, DDPCommunicationHookType.BATCHED_POWER_SGD)
_WRAPPERS = (DDPCommunicationHookType.NO, DDPCommunicationHookType.FP16, DDPCommunicationHookType.BF16)


def _kind(value: Any, name: str, allowed: tuple[DDPCommunicationHookType, ...]) -> DDPCommunicationHookType:
    try:
        kind = DDPCommunicationHookType(getattr(value, "value", value))
    except ValueError:
        kind = None
    if kind not in allowed:
        raise AcceleratorError(
            f"DistributedDataParallelKwargs({name}={value!r}) is not valid; use one of "
            f"{', '.join(f'DDPCommunicationHookType.{k.name}' for k in allowed)}."
        )
    return kind


def _check_device(kinds: tuple[DDPCommunicationHookType, ...], device: torch.device) -> None:
    if DDPCommunicationHookType.BF16 in kinds and device.type != "cuda":
        raise AcceleratorError(
            f"DDPCommunicationHookType.BF16 cannot run on {device.type}: torch's DDP takes bf16 gradient "
            "compression only with CUDA 11+ and NCCL 2.10+ (a bf16 all-reduce), which gloo on CPU does not have. "
            "Use DDPCommunicationHookType.FP16 (or NO) on CPU, or run on GPUs."
        )


def register_comm_hook(
    model: nn.parallel.DistributedDataParallel, options: dict[str, Any], device: torch.device
) -> None:
    """Register the hook `options` (the HOOK_FIELDS of DistributedDataParallelKwargs) names on a DDP
    model, as Accelerate does: a wrapper applies only around a hook; PowerSGD gets its state."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    hook_kind = _kind(options.get("comm_hook", "no"), "comm_hook", tuple(DDPCommunicationHookType))
    wrapper_kind = _kind(options.get("comm_wrapper", "no"), "comm_wrapper", _WRAPPERS)
    if hook_kind is DDPCommunicationHookType.NO:
        return
    _check_device((hook_kind, wrapper_kind), device)
    hooks: dict[DDPCommunicationHookType, Callable[..., Any]] = {
        DDPCommunicationHookType.FP16: default_hooks.fp16_compress_hook,
        DDPCommunicationHookType.BF16: default_hooks.bf16_compress_hook,
        DDPCommunicationHookType.POWER_SGD: powerSGD_hook.powerSGD_hook,
        DDPCommunicationHookType.BATCHED_POWER_SGD: powerSGD_hook.batched_powerSGD_hook,
    }
    hook = hooks[hook_kind]
    wrapper: Callable[..., Any] | None = {
        DDPCommunicationHookType.FP16: default_hooks.fp16_compress_wrapper,
        DDPCommunicationHookType.BF16: default_hooks.bf16_compress_wrapper,
    }.get(wrapper_kind)
    if wrapper is not None:
        hook = wrapper(hook)
    state = None
    if hook_kind in _POWER_SGD:
        state = powerSGD_hook.PowerSGDState(None, **dict(options.get("comm_state_option") or {}))
    model.register_comm_hook(state=state, hook=hook)
