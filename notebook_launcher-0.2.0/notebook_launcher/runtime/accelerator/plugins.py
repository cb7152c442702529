"""Accelerate's strategy plugins (FullyShardedDataParallelPlugin, DeepSpeedPlugin, TorchDynamoPlugin)
and the enums they use, mapped onto our launch config sections.

A plugin field left at None means "not given": the launch config (from the launcher or from
`accelerate launch`'s variables) decides, as Accelerate reads its environment for unset fields.
Options our FSDP2/DeepSpeed strategies cannot honour are named in one plain line, never dropped
silently.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from ...config.enums import _StrEnum
from ...errors import ConfigError
from ...system.private_files import run_dir, write_private
from .kwargs import KwargsHandler


class DynamoBackend(_StrEnum):
    """torch.compile backends under Accelerate's names (NO = do not compile)."""

    NO = "NO"
    EAGER = "EAGER"
    AOT_EAGER = "AOT_EAGER"
    INDUCTOR = "INDUCTOR"
    CUDAGRAPHS = "CUDAGRAPHS"
    ONNXRT = "ONNXRT"
    TENSORRT = "TENSORRT"
    TVM = "TVM"


class RNGType(_StrEnum):
    """Random number generators the prepared loaders can synchronise at each epoch start."""

    TORCH = "torch"
    CUDA = "cuda"
    GENERATOR = "generator"


@dataclass
class TorchDynamoPlugin(KwargsHandler):
    """torch.compile settings for `prepare` (Accelerate's `dynamo_plugin=`; `dynamo_backend=` is short
    for TorchDynamoPlugin(backend=...)). None fields come from the launch config."""

    backend: str | None = None
    mode: str | None = None
    fullgraph: bool | None = None
    dynamic: bool | None = None
    options: Any = None
    disable: bool = False
    use_regional_compilation: bool | None = None

    def __post_init__(self) -> None:
        if self.backend is not None:
            name = str(getattr(self.backend, "value", self.backend)).upper()
            if name not in DynamoBackend.__members__:
                raise ConfigError(
                    f"TorchDynamoPlugin(backend={self.backend!r}) is not a dynamo backend; use one of "
                    f"{', '.join(repr(b.value.lower()) for b in DynamoBackend)}."
                )
            self.backend = DynamoBackend(name)

    def to_dynamo_config(self) -> dict[str, Any]:
        """The dynamo_config keys this plugin sets (only the given ones)."""
        given = {
            "dynamo_backend": "NO" if self.disable else self.backend,
            "dynamo_mode": self.mode,
            "dynamo_use_fullgraph": self.fullgraph,
            "dynamo_use_dynamic": self.dynamic,
            "dynamo_use_regional_compilation": self.use_regional_compilation,
        }
        return {
            key: str(value) if isinstance(value, Enum) else value
            for key, value in given.items()
            if value is not None
        }


@dataclass
class FullyShardedDataParallelPlugin:
    """FSDP settings (Accelerate's `fsdp_plugin=`), run on our FSDP2 strategy (`fully_shard`)."""

    fsdp_version: int | None = None
    sharding_strategy: Any = None
    reshard_after_forward: Any = None
    backward_prefetch: Any = None
    mixed_precision_policy: Any = None
    auto_wrap_policy: Any = None
    cpu_offload: Any = None
    ignored_modules: Any = None
    state_dict_type: Any = None
    state_dict_config: Any = None
    optim_state_dict_config: Any = None
    limit_all_gathers: bool = True
    use_orig_params: bool | None = None
    param_init_fn: Callable[..., Any] | None = None
    sync_module_states: bool | None = None
    forward_prefetch: bool | None = None
    activation_checkpointing: bool | None = None
    activation_checkpointing_offload: bool | None = None
    cpu_ram_efficient_loading: bool | None = None
    transformer_cls_names_to_wrap: list[str] | None = None
    min_num_params: int | None = None

    def to_fsdp_config(self) -> dict[str, Any]:
        """The fsdp_config keys this plugin sets; unsupported options are named in one line each."""
        if callable(self.auto_wrap_policy):
            raise ConfigError(
                "FullyShardedDataParallelPlugin(auto_wrap_policy=<function>) is not supported; pass "
                "'transformer_based_wrap' with transformer_cls_names_to_wrap=[...], 'size_based_wrap' with "
                "min_num_params=..., or 'no_wrap'."
            )
        for name in (
            "mixed_precision_policy",
            "ignored_modules",
            "param_init_fn",
            "activation_checkpointing_offload",
        ):
            if getattr(self, name) not in (None, False):
                _say(
                    f"FullyShardedDataParallelPlugin({name}=...) is not honoured by the FSDP2 strategy; "
                    "precision follows mixed_precision and every parameter is sharded."
                )
        offload = self.cpu_offload
        if offload is not None and not isinstance(offload, bool):
            offload = bool(getattr(offload, "offload_params", offload))
        reshard = self.reshard_after_forward
        if isinstance(reshard, str) and reshard.lower() in ("true", "false"):
            reshard = reshard.lower() == "true"
        values = {
            "fsdp_version": self.fsdp_version if self.fsdp_version is not None else 2,
            "fsdp_sharding_strategy": _enum_name(self.sharding_strategy),
            "fsdp_reshard_after_forward": reshard if isinstance(reshard, bool) else None,
            "fsdp_backward_prefetch": _enum_name(self.backward_prefetch),
            "fsdp_auto_wrap_policy": _enum_name(self.auto_wrap_policy),
            "fsdp_offload_params": offload,
            "fsdp_state_dict_type": _enum_name(self.state_dict_type),
            "fsdp_use_orig_params": self.use_orig_params,
            "fsdp_sync_module_states": self.sync_module_states,
            "fsdp_forward_prefetch": self.forward_prefetch,
            "fsdp_activation_checkpointing": self.activation_checkpointing,
            "fsdp_cpu_ram_efficient_loading": self.cpu_ram_efficient_loading,
            "fsdp_transformer_layer_cls_to_wrap": self.transformer_cls_names_to_wrap,
            "fsdp_min_num_params": self.min_num_params,
        }
        if isinstance(reshard, str):  # FSDP1 spelled the sharding strategy here
            values["fsdp_sharding_strategy"] = values["fsdp_sharding_strategy"] or reshard.upper()
        return {key: value for key, value in values.items() if value is not None}


@dataclass
class DeepSpeedPlugin:
    """DeepSpeed settings (Accelerate's `deepspeed_plugin=`). hf_ds_config is a DeepSpeed JSON path or
    dict; the other fields fill the config where it says "auto" or leaves a key out."""

    hf_ds_config: Any = None
    gradient_accumulation_steps: Any = None
    gradient_clipping: Any = None
    zero_stage: int | None = None
    is_train_batch_min: bool = True
    offload_optimizer_device: str | None = None
    offload_param_device: str | None = None
    offload_optimizer_nvme_path: str | None = None
    offload_param_nvme_path: str | None = None
    zero3_init_flag: bool | None = None
    zero3_save_16bit_model: bool | None = None
    transformer_moe_cls_names: str | None = None
    enable_msamp: bool | None = None
    msamp_opt_level: str | None = None

    def to_deepspeed_config(self) -> dict[str, Any]:
        """The deepspeed_config keys this plugin sets."""
        values = {
            "deepspeed_config_file": _ds_config_path(self.hf_ds_config),
            "zero_stage": self.zero_stage,
            "offload_optimizer_device": self.offload_optimizer_device,
            "offload_param_device": self.offload_param_device,
            "gradient_clipping": None if self.gradient_clipping == "auto" else self.gradient_clipping,
            "gradient_accumulation_steps": (
                None if self.gradient_accumulation_steps == "auto" else self.gradient_accumulation_steps
            ),
            "zero3_init_flag": self.zero3_init_flag,
            "zero3_save_16bit_model": self.zero3_save_16bit_model,
        }
        return {key: value for key, value in values.items() if value is not None}


def _enum_name(value: Any) -> str | None:
    """'FULL_SHARD' from 'full_shard', ShardingStrategy.FULL_SHARD or 1 (FSDP1's numbering)."""
    if value is None or isinstance(value, bool):
        return None
    name = getattr(value, "name", value)
    return str(name).upper()


def _ds_config_path(config: Any) -> str | None:
    """A DeepSpeed config given as a dict is written to this run's private directory (never to a
    shared name another user could plant first; see system/private_files.py)."""
    if config is None or config == "none":
        return None
    if isinstance(config, (str, os.PathLike)):
        return os.fspath(config)
    if isinstance(config, dict):
        text = json.dumps(config, sort_keys=True)
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        return write_private(run_dir(), f"deepspeed-{digest}.json", text)
    raise ConfigError(
        f"DeepSpeedPlugin(hf_ds_config={type(config).__name__}) is not usable; pass the path of a DeepSpeed "
        "JSON file or the config as a dict."
    )


def _say(line: str) -> None:
    if os.environ.get("LOCAL_RANK", "0") == "0":
        print(f"notebook_launcher: {line}", file=sys.stderr)
