"""FSDP2 state on disk: full (unsharded) state dicts and sharded torch.distributed.checkpoint folders.

Two layouts inside a save_state folder:

- FULL_STATE_DICT: `model_{i}.bin` / `optimizer_{i}.bin`, written by rank 0, plain tensors keyed by
  parameter name (loadable by any strategy, or by `torch.load` alone).
- SHARDED_STATE_DICT: `pytorch_model_fsdp_{i}/` and `optimizer_{i}/`, torch.distributed.checkpoint
  folders every rank writes its shard into. They load on any number of ranks: DCP reshards.

Loading looks at what the folder holds, not at the current setting, so either layout loads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from ....errors import AcceleratorError
from ...checkpointing.writers import FileWriter, ImmediateWriter

# Gathering a full state dict: each tensor is gathered and moved to the CPU one at a time, onto rank 0
# only (torch keeps ranks_only=(0,) with cpu_offload), as Accelerate's get_state_dict does. Without
# cpu_offload, every rank would hold the whole model on its GPU at once.
_GATHER_FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)
_LOAD_FULL = StateDictOptions(full_state_dict=True)  # every rank passes the full dict it read
_SHARDED = StateDictOptions(full_state_dict=False)
# Optimizer state keyed by parameter name, not by group index: pipeline stages hold different
# parameters, and index-keyed param groups of one stage would overwrite another's in the folder.
SHARDED_BY_NAME = StateDictOptions(full_state_dict=False, flatten_optimizer_state_dict=True)


def sharded_model_dir(folder: Path, index: int) -> Path:
    return folder / f"pytorch_model_fsdp_{index}"


def sharded_optimizer_dir(folder: Path, index: int) -> Path:
    return folder / f"optimizer_{index}"


def is_sharded_checkpoint(folder: Path) -> bool:
    return sharded_model_dir(folder, 0).is_dir()


def inner_optimizer(optimizer: Any) -> torch.optim.Optimizer:
    """The user's torch optimizer inside an AcceleratedOptimizer."""
    return getattr(optimizer, "optimizer", optimizer)


def model_of(optimizer: Any, models: list[nn.Module]) -> nn.Module:
    """The prepared model whose parameters this optimizer updates."""
    ids = {id(p) for group in inner_optimizer(optimizer).param_groups for p in group["params"]}
    for model in models:
        if any(id(p) in ids for p in model.parameters()):
            return model
    raise AcceleratorError(
        "This optimizer updates none of the prepared models' parameters; pass the model and its optimizer "
        "to accelerator.prepare() (see docs/sharding.md, 'the optimizer rule')."
    )


def _to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_cpu(v) for v in value]
    return value


# ------------------------------------------------------------------------ full state dicts
def full_model_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The whole model's weights on rank 0, on CPU; {} on other ranks (a collective: call on all)."""
    return _to_cpu(get_model_state_dict(model, options=_GATHER_FULL))


def load_full_model_state(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Load a full state dict (every rank holds it) into the sharded model."""
    set_model_state_dict(model, state, options=_LOAD_FULL)  # type: ignore[arg-type]  # torch wants dict[str, ValueType] (invariant); tensors are ValueType


def full_optimizer_state(model: nn.Module, optimizer: Any) -> dict[str, Any]:
    """Optimizer state keyed by parameter name on rank 0, on CPU; {} on other ranks."""
    return _to_cpu(get_optimizer_state_dict(model, inner_optimizer(optimizer), options=_GATHER_FULL))


def load_full_optimizer_state(model: nn.Module, optimizer: Any, state: dict[str, Any]) -> None:
    set_optimizer_state_dict(model, inner_optimizer(optimizer), state, options=_LOAD_FULL)


# ---------------------------------------------------------------------- sharded checkpoints
def save_sharded(
    folder: Path,
    models: list[nn.Module],
    optimizers: list[Any],
    options: StateDictOptions = _SHARDED,
    writer: FileWriter | None = None,
) -> None:
    """Every rank writes its shards of every model and optimizer (torch.distributed.checkpoint), through
    writer (at once, or staged and written by the asynchronous save's thread)."""
    writer = writer or ImmediateWriter()
    for i, model in enumerate(models):
        state: dict[str, Any] = {"model": get_model_state_dict(model, options=options)}
        writer.dcp_save(state, sharded_model_dir(folder, i))
    for i, optimizer in enumerate(optimizers):
        model = model_of(optimizer, models)
        state = {"optimizer": get_optimizer_state_dict(model, inner_optimizer(optimizer), options=options)}
        writer.dcp_save(state, sharded_optimizer_dir(folder, i))


def load_sharded(
    folder: Path, models: list[nn.Module], optimizers: list[Any], options: StateDictOptions = _SHARDED
) -> None:
    """Read the shards this rank needs, whatever number of ranks wrote them."""
    for i, model in enumerate(models):
        path = _existing(sharded_model_dir(folder, i), "model", i)
        state: dict[str, Any] = {"model": get_model_state_dict(model, options=options)}
        dcp.load(state, checkpoint_id=str(path))
        set_model_state_dict(model, state["model"], options=options)
    for i, optimizer in enumerate(optimizers):
        path = _existing(sharded_optimizer_dir(folder, i), "optimizer", i)
        model = model_of(optimizer, models)
        inner = inner_optimizer(optimizer)
        state = {"optimizer": get_optimizer_state_dict(model, inner, options=options)}
        dcp.load(state, checkpoint_id=str(path))
        set_optimizer_state_dict(model, inner, state["optimizer"], options=options)


def _existing(path: Path, what: str, index: int) -> Path:
    if not path.is_dir():
        raise AcceleratorError(
            f"Sharded checkpoint folder {str(path)!r} for {what} {index} is missing; this checkpoint was saved "
            f"with fewer {what}s than were prepared now. Prepare the same objects as when it was saved."
        )
    return path
