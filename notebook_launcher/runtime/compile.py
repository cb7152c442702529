"""torch.compile applied by `prepare` when the run has a dynamo backend (Accelerate's dynamo_backend /
TorchDynamoPlugin / `accelerate launch --dynamo_backend`)."""

from __future__ import annotations

from collections import Counter
from typing import Any, cast

import torch
from torch import nn

from ..config.sections import DynamoConfig


def compile_kwargs(config: DynamoConfig, options: Any = None) -> dict[str, Any]:
    """torch.compile's arguments for these settings (only the ones that differ from torch's defaults)."""
    kwargs: dict[str, Any] = {"backend": config.dynamo_backend.lower()}
    if config.dynamo_mode != "default":
        kwargs["mode"] = config.dynamo_mode
    if config.dynamo_use_fullgraph:
        kwargs["fullgraph"] = True
    if config.dynamo_use_dynamic is not None:
        kwargs["dynamic"] = config.dynamo_use_dynamic
    if options is not None:
        kwargs["options"] = options
    return kwargs


def is_compiled(model: nn.Module) -> bool:
    return hasattr(model, "_orig_mod") or getattr(model, "_notebook_launcher_regions_compiled", False)


def compile_model(model: nn.Module, config: DynamoConfig, options: Any = None) -> nn.Module:
    """The compiled model, or with use_regional_compilation the same model with each repeated block
    (children of a ModuleList that share a class) compiled in place, which compiles one block once."""
    if not config.enabled or is_compiled(model):
        return model
    kwargs = compile_kwargs(config, options)
    if not config.dynamo_use_regional_compilation:
        return cast(nn.Module, torch.compile(model, **kwargs))  # an OptimizedModule
    inner = getattr(model, "module", model)
    for block_list in inner.modules():
        if isinstance(block_list, nn.ModuleList):
            counts = Counter(type(child) for child in block_list)
            for i, child in enumerate(block_list):
                if counts[type(child)] > 1:
                    block_list[i] = cast(nn.Module, torch.compile(child, **kwargs))
    model._notebook_launcher_regions_compiled = True  # type: ignore[assignment]  # torch types Module.__setattr__ as Tensor | Module; any value is kept
    return model
