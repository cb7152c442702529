"""Distribution strategies, looked up by the config's distributed_type (no if-ladders elsewhere):
base.Strategy (one device), ddp, fsdp/ and deepspeed/. A new strategy is a Strategy subclass in its
own module or package plus one line in _REGISTRY; the Accelerator does not change."""

from __future__ import annotations

import importlib

from ...errors import ConfigError
from .base import Strategy

# distributed_type -> "module:Class", imported only when used (FSDP/DeepSpeed pull heavy deps).
_REGISTRY = {
    "NO": "notebook_launcher.runtime.strategies.base:Strategy",
    "MULTI_CPU": "notebook_launcher.runtime.strategies.ddp:DDPStrategy",
    "MULTI_GPU": "notebook_launcher.runtime.strategies.ddp:DDPStrategy",
    "FSDP": "notebook_launcher.runtime.strategies.fsdp:FSDPStrategy",
    "DEEPSPEED": "notebook_launcher.runtime.strategies.deepspeed:DeepSpeedStrategy",
    # not a distributed_type: a ParallelismConfig's mesh (TP and/or FSDP2/HSDP), chosen by parallel/setup.py
    "PARALLELISM": "notebook_launcher.runtime.parallel.strategy:ModelParallelStrategy",
    # a mesh with a "pp" dim: the model cut into stages, each split as PARALLELISM splits a model
    "PIPELINE": "notebook_launcher.runtime.parallel.pipeline.strategy:PipelineStrategy",
}


def strategy_class(distributed_type: str) -> type[Strategy]:
    """The Strategy subclass for a distributed_type."""
    try:
        target = _REGISTRY[distributed_type]
    except KeyError:
        raise ConfigError(
            f"distributed_type={distributed_type!r} has no strategy; choose one of {sorted(_REGISTRY)}."
        ) from None
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("notebook_launcher"):
            raise ConfigError(
                f"distributed_type={distributed_type!r} is not available in this version yet."
            ) from None
        raise
    return getattr(module, class_name)


__all__ = ["Strategy", "strategy_class"]
