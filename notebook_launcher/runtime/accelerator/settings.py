"""The Accelerator constructor's arguments, Accelerate 1.x's way, turned into one AcceleratorSettings.

Precedence: explicit arguments > the launch config in the environment (ours, or what
`accelerate launch` set) > defaults. Arguments Accelerate removed raise a TypeError that names the
replacement; options we cannot run raise an error that says what to use instead.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...config import LaunchConfig, config_from_env
from ...errors import AcceleratorError, AcceleratorValueError, ConfigError, closest
from .configurations import DataLoaderConfiguration, GradientAccumulationPlugin, ProjectConfiguration
from .kwargs import (
    AutocastKwargs,
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    ProfileKwargs,
)
from .plugins import DeepSpeedPlugin, FullyShardedDataParallelPlugin, TorchDynamoPlugin

HANDLER_KINDS = (
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    AutocastKwargs,
    InitProcessGroupKwargs,
    ProfileKwargs,
)

# Keyword arguments Accelerate removed from Accelerator(), and what replaced them.
REMOVED_ARGUMENTS = {
    "even_batches": "dataloader_config=DataLoaderConfiguration(even_batches=...)",
    "dispatch_batches": "dataloader_config=DataLoaderConfiguration(dispatch_batches=...)",
    "use_seedable_sampler": "dataloader_config=DataLoaderConfiguration(use_seedable_sampler=...)",
    "logging_dir": "project_config=ProjectConfiguration(project_dir=..., logging_dir=...)",
    "fp16": 'mixed_precision="fp16"',
}
_UNSUPPORTED = {
    "torch_tp_plugin": "tensor parallelism is not supported; shard the model with fsdp_plugin instead",
    "megatron_lm_plugin": "Megatron-LM is not supported; use fsdp_plugin or deepspeed_plugin",
}

_NOT_GIVEN: Any = (
    object()
)  # split_batches' default: Accelerate 1.x keeps the name but reads dataloader_config


@dataclass
class AcceleratorSettings:
    """Everything the constructor decided, before any process group exists."""

    config: LaunchConfig
    dataloader_config: DataLoaderConfiguration
    project_configuration: ProjectConfiguration
    gradient_accumulation_plugin: GradientAccumulationPlugin
    handlers: dict[type, Any] = field(default_factory=dict)
    plugins: dict[str, Any] = field(default_factory=dict)


def check_removed_arguments(removed: dict[str, Any], constructor: Callable[..., Any]) -> None:
    """Accelerator(**unknown): Accelerate's removed names get their replacement, typos the nearest
    name among `constructor`'s parameters (the facade hands in its __init__; this module is below it)."""
    for name in removed:
        if name in REMOVED_ARGUMENTS:
            raise TypeError(
                f"Accelerator() got the keyword argument {name!r}, which Accelerate 1.x removed; use "
                f"{REMOVED_ARGUMENTS[name]} instead."
            )
        known = [p for p in inspect.signature(constructor).parameters if p not in ("self", "removed")]
        raise TypeError(f"Accelerator() got an unexpected keyword argument {name!r}.{closest(name, known)}")


def resolve(
    *,
    split_batches: Any,
    mixed_precision: Any,
    gradient_accumulation_steps: int | None,
    cpu: bool,
    dataloader_config: Any,
    deepspeed_plugin: Any,
    fsdp_plugin: Any,
    project_dir: Any,
    project_config: Any,
    gradient_accumulation_plugin: Any,
    kwargs_handlers: Any,
    dynamo_backend: Any,
    dynamo_plugin: Any,
    unsupported: dict[str, Any],
) -> AcceleratorSettings:
    for name, value in unsupported.items():
        if value is not None:
            raise AcceleratorError(f"Accelerator({name}=...): {_UNSUPPORTED[name]}.")
    loader_config = _dataloader_config(dataloader_config, split_batches)
    project = _project_config(project_config, project_dir)
    accumulation = _accumulation(gradient_accumulation_plugin, gradient_accumulation_steps)
    plugins = _plugins(fsdp_plugin, deepspeed_plugin, dynamo_plugin, dynamo_backend)
    config = _launch_config(mixed_precision, accumulation.num_steps, cpu, plugins)
    if accumulation.num_steps is None:
        accumulation = dataclasses.replace(accumulation, num_steps=config.gradient_accumulation_steps)
    return AcceleratorSettings(
        config=config,
        dataloader_config=loader_config,
        project_configuration=project,
        gradient_accumulation_plugin=accumulation,
        handlers=_index_handlers(kwargs_handlers or []),
        plugins=plugins,
    )


def _adopt(obj: Any, cls: type, argument: str) -> Any:
    """Our class as is; the same-named object of another library (accelerate's own) by its fields."""
    if obj is None or isinstance(obj, cls):
        return obj
    if dataclasses.is_dataclass(obj) and type(obj).__name__ == cls.__name__:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.name in names})
    raise ConfigError(
        f"{argument}={obj!r} must be a {cls.__name__} (from notebook_launcher.utils import {cls.__name__})."
    )


def _dataloader_config(given: Any, split_batches: Any) -> DataLoaderConfiguration:
    config = _adopt(given, DataLoaderConfiguration, "dataloader_config")
    if split_batches is _NOT_GIVEN:
        return config or DataLoaderConfiguration()
    if config is not None:
        raise ConfigError(
            "Accelerator() got both split_batches= and dataloader_config=; pass only "
            "dataloader_config=DataLoaderConfiguration(split_batches=...)."
        )
    warnings.warn(
        "Accelerator(split_batches=...) is the pre-1.0 spelling (Accelerate 1.x ignores it); it is applied "
        "here, but write dataloader_config=DataLoaderConfiguration(split_batches=...).",
        FutureWarning,
        stacklevel=4,
    )
    return DataLoaderConfiguration(split_batches=bool(split_batches))


def _project_config(given: Any, project_dir: Any) -> ProjectConfiguration:
    project = _adopt(given, ProjectConfiguration, "project_config") or ProjectConfiguration()
    if project_dir is not None and project.project_dir is None:
        project.set_directories(os.fspath(project_dir))
    return project


def _accumulation(plugin: Any, steps: int | None) -> GradientAccumulationPlugin:
    plugin = _adopt(plugin, GradientAccumulationPlugin, "gradient_accumulation_plugin")
    if plugin is not None and steps is not None:
        raise ConfigError(
            f"Accelerator() got gradient_accumulation_steps={steps!r} and a gradient_accumulation_plugin; pass one "
            "(GradientAccumulationPlugin(num_steps=...) holds the number too)."
        )
    if plugin is not None:
        return plugin
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise ConfigError(
            f"gradient_accumulation_steps={steps!r} must be a whole number >= 1 (1 means: step the optimizer "
            "every batch)."
        )
    return GradientAccumulationPlugin(num_steps=steps)


def _plugins(fsdp: Any, deepspeed: Any, dynamo: Any, backend: Any) -> dict[str, Any]:
    if isinstance(deepspeed, dict):
        if len(deepspeed) != 1:
            raise AcceleratorError(
                f"deepspeed_plugin got {len(deepspeed)} named plugins; several DeepSpeed configs in one run are "
                "not supported. Pass one DeepSpeedPlugin."
            )
        deepspeed = next(iter(deepspeed.values()))
    fsdp = _adopt(fsdp, FullyShardedDataParallelPlugin, "fsdp_plugin")
    deepspeed = _adopt(deepspeed, DeepSpeedPlugin, "deepspeed_plugin")
    if fsdp is not None and deepspeed is not None:
        raise ConfigError(
            "Accelerator() got fsdp_plugin and deepspeed_plugin; both shard the model, pass one."
        )
    if dynamo is not None and backend is not None:
        raise ConfigError("Accelerator() got dynamo_backend and dynamo_plugin; pass one.")
    if backend is not None:
        dynamo = TorchDynamoPlugin(backend=getattr(backend, "value", backend))
    dynamo = _adopt(dynamo, TorchDynamoPlugin, "dynamo_plugin")
    found = {"fsdp": fsdp, "deepspeed": deepspeed, "dynamo": dynamo}
    return {key: value for key, value in found.items() if value is not None}


def _launch_config(
    mixed_precision: Any, steps: int | None, cpu: bool, plugins: dict[str, Any]
) -> LaunchConfig:
    base = config_from_env() or LaunchConfig()
    overrides: dict[str, Any] = {
        "mixed_precision": None
        if mixed_precision is None
        else str(getattr(mixed_precision, "value", mixed_precision)),
        "gradient_accumulation_steps": steps,
    }
    if cpu:
        overrides["use_cpu"] = True
    if "fsdp" in plugins:
        overrides.update(distributed_type="FSDP", fsdp_config=plugins["fsdp"].to_fsdp_config())
    if "deepspeed" in plugins:
        overrides.update(
            distributed_type="DEEPSPEED", deepspeed_config=plugins["deepspeed"].to_deepspeed_config()
        )
    if "dynamo" in plugins:
        overrides["dynamo_config"] = plugins["dynamo"].to_dynamo_config()
    return base.replace(**overrides)


def _index_handlers(handlers: list[Any]) -> dict[type, Any]:
    out: dict[type, Any] = {}
    for handler in handlers:
        kind = next((k for k in HANDLER_KINDS if isinstance(handler, k)), None)
        if kind is None:
            kind = next((k for k in HANDLER_KINDS if type(handler).__name__ == k.__name__), None)
            handler = _adopt(handler, kind, "kwargs_handlers") if kind is not None else handler
        if kind is None:
            raise AcceleratorError(
                f"Unsupported kwargs handler {handler!r}; use one of {[k.__name__ for k in HANDLER_KINDS]}."
            )
        if kind in out:
            raise AcceleratorValueError(f"Two {kind.__name__} handlers were given; pass each kind once.")
        out[kind] = handler
    return out
