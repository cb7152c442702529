"""The DeepSpeed config dict: from a DeepSpeed JSON file or from our `deepspeed_config` fields.

Plain dict work, no torch or deepspeed import, so it is tested in one process. Rules:

- With a JSON file, every value it sets is used as written; a value of "auto" (Accelerate's
  convention) and the batch-size keys it leaves out are filled from the launch config and the data
  loader. Without a file, the dict is made from `deepspeed_config` (zero_stage, offload devices,
  gradient_clipping, gradient_accumulation_steps).
- Gradient accumulation: one number for the Accelerator and the engine. A file's number is adopted
  when the launch config leaves accumulation at 1; two different numbers > 1 are an error.
- Gradient clipping: "auto" or no file means our gradient_clipping, or 0.0 (off) when unset, so
  results match DDP (DeepSpeed's own default would clip at 1.0). A file without the key takes our
  gradient_clipping when it is set, else keeps DeepSpeed's default; a file with another number
  than ours is refused when the launch config is built (config/sections.py).
- Precision: "auto" follows mixed_precision; a file that enables fp16/bf16 must agree with it.
- ZeRO buckets: sized from the model's largest parameter (sizing.py) unless a file sets them.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from ....config import LaunchConfig
from ....config.sections import read_deepspeed_json
from ....errors import ConfigError
from .sizing import fill_sizes

AUTO = "auto"


@dataclass
class EngineConfig:
    """What DeepSpeed is initialised with, plus the accumulation the Accelerator must use."""

    config: dict[str, Any]
    gradient_accumulation_steps: int
    source: str

    @property
    def zero_stage(self) -> int:
        return int(self.config.get("zero_optimization", {}).get("stage", 0))

    @property
    def has_optimizer(self) -> bool:
        return "optimizer" in self.config

    @property
    def has_scheduler(self) -> bool:
        return "scheduler" in self.config


def build_engine_config(
    launch: LaunchConfig,
    *,
    micro_batch_size: int | None,
    world_size: int,
    client_optimizer: bool,
    largest_parameter: int | None = None,
) -> EngineConfig:
    """The full DeepSpeed config for this run; raises ConfigError naming the key and the fix.

    largest_parameter (elements) sizes ZeRO's buckets from the model (see sizing.py)."""
    ds = launch.deepspeed_config
    if ds.deepspeed_config_file:
        source = f"DeepSpeed config file {ds.deepspeed_config_file!r}"
        config = copy.deepcopy(read_deepspeed_json(ds.deepspeed_config_file))
    else:
        source = "deepspeed_config"
        config = _from_fields(launch)
    steps = _accumulation(launch, config, source)
    config["gradient_accumulation_steps"] = steps
    _fill_batch_sizes(config, micro_batch_size, steps, world_size)
    _fill_clipping(config, launch, from_file=bool(ds.deepspeed_config_file))
    _fill_precision(config, launch.mixed_precision, source)
    _fill_zero(config, source, largest_parameter, from_file=bool(ds.deepspeed_config_file))
    if client_optimizer:
        if "optimizer" in config:
            raise ConfigError(
                f"{source} has an 'optimizer' section and an optimizer was also passed to prepare(); remove the "
                "section, or pass no optimizer (DeepSpeed then builds the one the file describes)."
            )
        config.setdefault("zero_allow_untested_optimizer", True)
    config.setdefault("steps_per_print", 2**31 - 1)  # DeepSpeed's own progress lines, unless asked for
    _reject_leftover_auto(config, source)
    return EngineConfig(config, steps, source)


def _from_fields(launch: LaunchConfig) -> dict[str, Any]:
    ds = launch.deepspeed_config
    zero: dict[str, Any] = {"stage": ds.zero_stage}
    if ds.offload_optimizer_device != "none":
        zero["offload_optimizer"] = {"device": ds.offload_optimizer_device}
    if ds.offload_param_device != "none":
        if ds.zero_stage != 3:
            raise ConfigError(
                f"deepspeed_config.offload_param_device={ds.offload_param_device!r} needs zero_stage=3 (parameter "
                f"offload is a ZeRO-3 feature), but zero_stage={ds.zero_stage}; set zero_stage=3 or offload to 'none'."
            )
        zero["offload_param"] = {"device": ds.offload_param_device}
    for key in ("offload_optimizer", "offload_param"):
        if zero.get(key, {}).get("device") == "nvme":
            raise ConfigError(
                f"deepspeed_config {key} device 'nvme' needs an nvme_path; describe it in a DeepSpeed JSON config "
                "file (deepspeed_config_file), or offload to 'cpu'."
            )
    config: dict[str, Any] = {"zero_optimization": zero, "gradient_clipping": AUTO}
    config["fp16"] = {"enabled": AUTO}
    config["bf16"] = {"enabled": AUTO}
    return config


def _accumulation(launch: LaunchConfig, config: dict[str, Any], source: str) -> int:
    ours = launch.gradient_accumulation_steps
    field = launch.deepspeed_config.gradient_accumulation_steps
    if field is not None and ours not in (1, field):
        raise ConfigError(
            f"gradient_accumulation_steps={ours} but deepspeed_config.gradient_accumulation_steps={field}; "
            "set one of them (or both to the same number)."
        )
    ours = field if ours == 1 and field is not None else ours
    theirs = config.get("gradient_accumulation_steps", AUTO)
    if theirs == AUTO:
        return int(ours)
    if isinstance(theirs, bool) or not isinstance(theirs, int) or theirs < 1:
        raise ConfigError(
            f"gradient_accumulation_steps={theirs!r} in {source} must be a positive integer or 'auto'."
        )
    if ours not in (1, theirs):
        raise ConfigError(
            f"gradient_accumulation_steps={ours} in the launch config but {theirs} in {source}; set one of them, "
            'or write "auto" in the file.'
        )
    return theirs


def _fill_batch_sizes(config: dict[str, Any], micro: int | None, steps: int, world: int) -> None:
    micro_value = config.get("train_micro_batch_size_per_gpu", AUTO)
    total = config.get("train_batch_size", AUTO)
    if micro_value == AUTO:
        if total != AUTO:
            micro_value = max(1, int(total) // (steps * world))
        else:
            # Only DeepSpeed's throughput log reads it when our loaders feed the engine.
            micro_value = micro or 1
        config["train_micro_batch_size_per_gpu"] = micro_value
    if total == AUTO:
        config["train_batch_size"] = int(micro_value) * steps * world


def _fill_clipping(config: dict[str, Any], launch: LaunchConfig, *, from_file: bool) -> None:
    ours = launch.deepspeed_config.gradient_clipping
    value = config.get("gradient_clipping", None if from_file else AUTO)
    if value == AUTO or (value is None and ours is not None):  # a file without the key takes ours
        config["gradient_clipping"] = float(ours) if ours is not None else 0.0


def _fill_precision(config: dict[str, Any], mixed_precision: str, source: str) -> None:
    wanted = {"fp16": mixed_precision == "fp16", "bf16": mixed_precision in ("bf16", "fp8")}
    for key in ("fp16", "bf16"):
        section = config.get(key)
        if section is None:
            if wanted[key]:
                config[key] = {"enabled": True}
            continue
        enabled = section.get("enabled", AUTO)
        if enabled == AUTO:
            section["enabled"] = wanted[key]
        elif bool(enabled) and not wanted[key]:
            raise ConfigError(
                f'{source} enables {key} ("{key}": {{"enabled": true}}) but mixed_precision={mixed_precision!r}; '
                f'set mixed_precision={key!r}, or write "enabled": "auto" in the file.'
            )
    if config.get("fp16", {}).get("enabled") is True and config.get("bf16", {}).get("enabled") is True:
        raise ConfigError(f"{source} enables both fp16 and bf16; enable one.")


def _fill_zero(config: dict[str, Any], source: str, largest: int | None, *, from_file: bool) -> None:
    zero = config.setdefault("zero_optimization", {"stage": 0})
    if not isinstance(zero, dict):
        raise ConfigError(f'zero_optimization in {source} must be an object like {{"stage": 2}}.')
    if zero.get("stage", 0) == AUTO:
        raise ConfigError(f'zero_optimization.stage is "auto" in {source}; write 0, 1, 2 or 3.')
    fill_sizes(zero, largest, from_file=from_file)


def _reject_leftover_auto(value: Any, source: str, path: str = "") -> None:
    if value == AUTO:
        raise ConfigError(
            f'{path} is "auto" in {source}, which notebook_launcher cannot fill; write a value.'
        )
    if isinstance(value, dict):
        for key, inner in value.items():
            _reject_leftover_auto(inner, source, f"{path}.{key}" if path else key)
