"""The env contract in Accelerate's words, both ways.

- `accelerate launch` tells each worker what to run with through ACCELERATE_* and FSDP_* variables
  (accelerate/utils/launch.py). `config_from_accelerate_env` reads them into a LaunchConfig, so our
  `Accelerator()` inside `accelerate launch` uses the launch's precision, accumulation, strategy,
  compile backend and CPU choice.
- Our launchers export the same variables (`accelerate_env`) next to our own, so a function that
  still builds HuggingFace's `Accelerator()` inside `notebook_launch` or `notebook-launcher launch`
  gets the launch's config too.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from .launch_config import LaunchConfig
from .parallelism import to_env as parallelism_env

USE_FSDP = "ACCELERATE_USE_FSDP"
USE_DEEPSPEED = "ACCELERATE_USE_DEEPSPEED"
USE_CPU = "ACCELERATE_USE_CPU"
MIXED_PRECISION = "ACCELERATE_MIXED_PRECISION"
ACCUMULATION = "ACCELERATE_GRADIENT_ACCUMULATION_STEPS"
_TRUE = ("1", "true", "yes", "y", "on", "t")

# FSDP_* variable <-> fsdp_config key (Accelerate's launcher writes lower-case booleans).
_FSDP_VARS = {
    "FSDP_VERSION": "fsdp_version",
    "FSDP_SHARDING_STRATEGY": "fsdp_sharding_strategy",
    "FSDP_RESHARD_AFTER_FORWARD": "fsdp_reshard_after_forward",
    "FSDP_OFFLOAD_PARAMS": "fsdp_offload_params",
    "FSDP_MIN_NUM_PARAMS": "fsdp_min_num_params",
    "FSDP_AUTO_WRAP_POLICY": "fsdp_auto_wrap_policy",
    "FSDP_TRANSFORMER_CLS_TO_WRAP": "fsdp_transformer_layer_cls_to_wrap",
    "FSDP_BACKWARD_PREFETCH": "fsdp_backward_prefetch",
    "FSDP_STATE_DICT_TYPE": "fsdp_state_dict_type",
    "FSDP_FORWARD_PREFETCH": "fsdp_forward_prefetch",
    "FSDP_USE_ORIG_PARAMS": "fsdp_use_orig_params",
    "FSDP_CPU_RAM_EFFICIENT_LOADING": "fsdp_cpu_ram_efficient_loading",
    "FSDP_SYNC_MODULE_STATES": "fsdp_sync_module_states",
    "FSDP_ACTIVATION_CHECKPOINTING": "fsdp_activation_checkpointing",
}
_DEEPSPEED_VARS = {
    "ACCELERATE_DEEPSPEED_ZERO_STAGE": "zero_stage",
    "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE": "offload_optimizer_device",
    "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE": "offload_param_device",
    "ACCELERATE_GRADIENT_CLIPPING": "gradient_clipping",
    "ACCELERATE_DEEPSPEED_ZERO3_INIT": "zero3_init_flag",
    "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL": "zero3_save_16bit_model",
    "ACCELERATE_DEEPSPEED_CONFIG_FILE": "deepspeed_config_file",
}
_DYNAMO_VARS = {
    "ACCELERATE_DYNAMO_BACKEND": "dynamo_backend",
    "ACCELERATE_DYNAMO_MODE": "dynamo_mode",
    "ACCELERATE_DYNAMO_USE_FULLGRAPH": "dynamo_use_fullgraph",
    "ACCELERATE_DYNAMO_USE_DYNAMIC": "dynamo_use_dynamic",
    "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION": "dynamo_use_regional_compilation",
}


def _flag(raw: str | None) -> bool:
    return str(raw).strip().lower() in _TRUE


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _section(environ: Mapping[str, str], names: dict[str, str], skip: tuple[str, ...] = ()) -> dict[str, Any]:
    return {key: environ[var] for var, key in names.items() if environ.get(var) not in (None, "", *skip)}


def launched_by_accelerate(environ: Mapping[str, str] | None = None) -> bool:
    """True inside `accelerate launch` (it always sets ACCELERATE_MIXED_PRECISION and ..._USE_CPU)."""
    environ = os.environ if environ is None else environ
    return MIXED_PRECISION in environ or USE_CPU in environ


def config_from_accelerate_env(environ: Mapping[str, str] | None = None) -> LaunchConfig | None:
    """The LaunchConfig `accelerate launch` describes in this process's environment, or None."""
    environ = os.environ if environ is None else environ
    if not launched_by_accelerate(environ):
        return None
    data: dict[str, Any] = {"use_cpu": _flag(environ.get(USE_CPU))}
    if environ.get(MIXED_PRECISION):
        data["mixed_precision"] = environ[MIXED_PRECISION]
    if str(environ.get(ACCUMULATION, "")).isdigit():
        data["gradient_accumulation_steps"] = int(environ[ACCUMULATION])
    if _flag(environ.get("ACCELERATE_DEBUG_MODE")):
        data["debug"] = True
    dynamo = _section(environ, _DYNAMO_VARS)
    if dynamo:
        data["dynamo_config"] = dynamo
    if _flag(environ.get(USE_FSDP)):
        data["distributed_type"] = "FSDP"
        fsdp = _section(environ, _FSDP_VARS)
        if str(fsdp.get("fsdp_reshard_after_forward", "")).upper() in ("FULL_SHARD", "SHARD_GRAD_OP"):
            # FSDP1 wrote the sharding strategy name here; FSDP2 a boolean.
            fsdp["fsdp_sharding_strategy"] = fsdp.pop("fsdp_reshard_after_forward").upper()
        data["fsdp_config"] = fsdp
    elif _flag(environ.get(USE_DEEPSPEED)):
        data["distributed_type"] = "DEEPSPEED"
        deepspeed = _section(environ, _DEEPSPEED_VARS, skip=("none", "auto"))
        steps = environ.get(ACCUMULATION, "")
        if steps.isdigit():
            deepspeed["gradient_accumulation_steps"] = int(steps)
        data["deepspeed_config"] = deepspeed
    return LaunchConfig.from_dict(data, source="the ACCELERATE_*/FSDP_* variables of `accelerate launch`")


def accelerate_env(config: LaunchConfig, *, cpu_world: bool) -> dict[str, str]:
    """The variables HuggingFace's own Accelerator reads, describing the same run as `config`.

    cpu_world: the ranks run on CPUs (no GPU, or use_cpu). Accelerate builds a multi-process CPU
    world only when told so (ACCELERATE_USE_CPU), so it is set whenever the world is on CPUs.
    """
    env = {
        MIXED_PRECISION: config.mixed_precision,
        ACCUMULATION: str(config.gradient_accumulation_steps),
        USE_CPU: _text(bool(config.use_cpu or cpu_world)),
    }
    if config.debug:
        env["ACCELERATE_DEBUG_MODE"] = "true"
    if config.dynamo_config.enabled:
        dynamo = config.dynamo_config
        env.update({var: _text(getattr(dynamo, key)) for var, key in _DYNAMO_VARS.items()})
        if dynamo.dynamo_use_dynamic is None:
            env.pop("ACCELERATE_DYNAMO_USE_DYNAMIC")
    if config.distributed_type == "FSDP":
        env[USE_FSDP] = "true"
        fsdp = config.fsdp_config
        values = {var: getattr(fsdp, key) for var, key in _FSDP_VARS.items()}
        values["FSDP_RESHARD_AFTER_FORWARD"] = fsdp.reshard_after_forward
        values["FSDP_TRANSFORMER_CLS_TO_WRAP"] = ",".join(fsdp.layer_classes()) or None
        env.update({var: _text(value) for var, value in values.items() if value is not None})
    elif config.distributed_type == "DEEPSPEED":
        env[USE_DEEPSPEED] = "true"
        deepspeed = config.deepspeed_config
        values = {var: getattr(deepspeed, key) for var, key in _DEEPSPEED_VARS.items()}
        env.update({var: _text(value) for var, value in values.items() if value is not None})
        if deepspeed.gradient_accumulation_steps is not None:
            env[ACCUMULATION] = str(deepspeed.gradient_accumulation_steps)
    env.update(
        parallelism_env(config.parallelism_config)
    )  # ACCELERATE_USE_PARALLELISM_CONFIG, PARALLELISM_CONFIG_*
    return env
