"""What FSDP2 will do to a model, decided before anything is sharded: pure module-tree arithmetic.

Which submodules become their own FSDP unit (by layer class name or by parameter count), the
device-mesh shape of each sharding strategy, and the mixed-precision policy. Nothing here touches
a process group, so all of it is testable in one process.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn

from ....config import FSDPConfig
from ....errors import ConfigError

_POLICY_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp8": torch.bfloat16}


def wrap_policy(config: FSDPConfig) -> str:
    """The effective auto-wrap policy; layer class names alone imply TRANSFORMER_BASED_WRAP."""
    if config.fsdp_auto_wrap_policy is not None:
        return config.fsdp_auto_wrap_policy
    return "TRANSFORMER_BASED_WRAP" if config.layer_classes() else "NO_WRAP"


def module_class_names(model: nn.Module) -> list[str]:
    """Every module class name in the model, sorted: what fsdp_transformer_layer_cls_to_wrap can name."""
    return sorted({type(m).__name__ for m in model.modules()})


def layers_by_class(model: nn.Module, names: list[str]) -> list[nn.Module]:
    """Submodules whose class name is in `names`; every name must match at least one module."""
    found = {type(m).__name__ for m in model.modules()}
    missing = [n for n in names if n not in found]
    if missing:
        raise ConfigError(
            f"fsdp_config.fsdp_transformer_layer_cls_to_wrap names {', '.join(repr(n) for n in missing)}, "
            f"which is not a module class in this model ({type(model).__name__}). Its module classes are: "
            f"{', '.join(module_class_names(model))}. Set fsdp_transformer_layer_cls_to_wrap to the class of "
            "the repeated block (e.g. 'TransformerEncoderLayer')."
        )
    wanted = set(names)
    return [m for m in model.modules() if m is not model and type(m).__name__ in wanted]


def layers_by_size(model: nn.Module, min_num_params: int) -> list[nn.Module]:
    """Post-order: a submodule becomes a unit when its not-yet-wrapped parameters reach min_num_params."""
    chosen: list[nn.Module] = []
    claimed: set[int] = set()

    def visit(module: nn.Module) -> None:
        for child in module.children():
            visit(child)
        if module is model:
            return
        free = sum(p.numel() for p in module.parameters() if id(p) not in claimed)
        if free >= min_num_params and free > 0:
            chosen.append(module)
            claimed.update(id(p) for p in module.parameters())

    visit(model)
    return chosen


def layers_to_wrap(model: nn.Module, config: FSDPConfig) -> list[nn.Module]:
    """The submodules that get their own fully_shard call, innermost first (the root comes last)."""
    policy = wrap_policy(config)
    if policy == "TRANSFORMER_BASED_WRAP":
        layers = layers_by_class(model, config.layer_classes())
        return _innermost_first(model, layers)
    if policy == "SIZE_BASED_WRAP":
        return layers_by_size(model, int(config.fsdp_min_num_params))
    return []


def _innermost_first(model: nn.Module, layers: list[nn.Module]) -> list[nn.Module]:
    """fully_shard must see a nested unit before its parent: order by post-order position."""
    position = {id(m): i for i, m in enumerate(_post_order(model))}
    return sorted(layers, key=lambda m: position[id(m)])


def _post_order(module: nn.Module) -> Iterator[nn.Module]:
    for child in module.children():
        yield from _post_order(child)
    yield module


def wrapped_names(model: nn.Module, config: FSDPConfig) -> list[str]:
    """Qualified names of the modules that would be wrapped (for notes and tests)."""
    ids = {id(m) for m in layers_to_wrap(model, config)}
    return [name for name, m in model.named_modules() if id(m) in ids]


def mesh_shape(sharding_strategy: str, world_size: int, local_world_size: int) -> tuple[int, ...]:
    """1-D mesh over all ranks, or for HYBRID_SHARD (machines, processes per machine)."""
    if sharding_strategy != "HYBRID_SHARD":
        return (world_size,)
    if local_world_size < 1 or world_size % local_world_size:
        raise ConfigError(
            f"HYBRID_SHARD needs the same number of processes on every machine: world size {world_size} is "
            f"not a multiple of the {local_world_size} processes on this machine."
        )
    return (world_size // local_world_size, local_world_size)


def policy_dtype(mixed_precision: str) -> torch.dtype | None:
    """The parameter dtype FSDP computes in for a mixed_precision mode (None: keep fp32)."""
    return _POLICY_DTYPES.get(mixed_precision)


def count_parameters(model: nn.Module) -> tuple[int, int]:
    """(local shard numel, full numel) over the model's parameters, DTensor-aware."""
    local = total = 0
    for p in model.parameters():
        to_local = getattr(p, "to_local", None)
        local += to_local().numel() if to_local is not None else p.numel()
        total += p.numel()
    return local, total
