"""The FSDP and DeepSpeed sections of a launch config, keyed exactly like Accelerate's YAML."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError, bad_value

FSDP_SHARDING_STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD")
FSDP_WRAP_POLICIES = ("TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP")
FSDP_STATE_DICT_TYPES = ("FULL_STATE_DICT", "SHARDED_STATE_DICT")
FSDP_BACKWARD_PREFETCH = ("BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH")
OFFLOAD_DEVICES = ("none", "cpu", "nvme")
ZERO_STAGES = (0, 1, 2, 3)
# Accelerate's deepspeed_multinode_launcher values; only "standard" (torchrun on every machine) is ours.
DEEPSPEED_MULTINODE_LAUNCHERS = ("pdsh", "standard", "openmpi", "mvapich", "mpich", "nossh")
DYNAMO_BACKENDS = ("NO", "EAGER", "AOT_EAGER", "INDUCTOR", "CUDAGRAPHS", "ONNXRT", "TENSORRT", "TVM")
DYNAMO_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")

# Accelerate (FSDP1) wrote sharding strategies as numbers in older configs.
_SHARDING_BY_NUMBER = {1: "FULL_SHARD", 2: "SHARD_GRAD_OP", 3: "NO_SHARD", 4: "HYBRID_SHARD"}


@dataclass
class FSDPConfig:
    """How FSDP2 shards a model. Field names are Accelerate's `fsdp_config` keys."""

    fsdp_version: int = 2
    fsdp_sharding_strategy: str = "FULL_SHARD"
    fsdp_auto_wrap_policy: str | None = None
    fsdp_transformer_layer_cls_to_wrap: str | None = None
    fsdp_min_num_params: int = 100_000_000
    fsdp_offload_params: bool = False
    fsdp_state_dict_type: str = "FULL_STATE_DICT"
    fsdp_activation_checkpointing: bool = False
    fsdp_reshard_after_forward: bool | None = None
    fsdp_backward_prefetch: str | None = None
    fsdp_forward_prefetch: bool = False
    fsdp_use_orig_params: bool = True
    fsdp_cpu_ram_efficient_loading: bool = False
    fsdp_sync_module_states: bool = True

    def validate(self) -> None:
        if self.fsdp_version not in (1, 2):
            raise bad_value("fsdp_config.fsdp_version", self.fsdp_version, (1, 2))
        if str(self.fsdp_sharding_strategy).isdigit():
            number = int(self.fsdp_sharding_strategy)
            self.fsdp_sharding_strategy = _SHARDING_BY_NUMBER.get(number, str(number))
        self.fsdp_sharding_strategy = str(self.fsdp_sharding_strategy).upper()
        if self.fsdp_sharding_strategy not in FSDP_SHARDING_STRATEGIES:
            raise bad_value(
                "fsdp_config.fsdp_sharding_strategy", self.fsdp_sharding_strategy, FSDP_SHARDING_STRATEGIES
            )
        if self.fsdp_auto_wrap_policy is not None:
            self.fsdp_auto_wrap_policy = str(self.fsdp_auto_wrap_policy).upper()
            if self.fsdp_auto_wrap_policy not in FSDP_WRAP_POLICIES:
                raise bad_value(
                    "fsdp_config.fsdp_auto_wrap_policy", self.fsdp_auto_wrap_policy, FSDP_WRAP_POLICIES
                )
        if self.fsdp_auto_wrap_policy == "TRANSFORMER_BASED_WRAP" and not self.layer_classes():
            raise ConfigError(
                "fsdp_config.fsdp_auto_wrap_policy=TRANSFORMER_BASED_WRAP needs "
                "fsdp_transformer_layer_cls_to_wrap, e.g. 'TransformerEncoderLayer'."
            )
        if int(self.fsdp_min_num_params) < 0:
            raise ConfigError(f"fsdp_config.fsdp_min_num_params={self.fsdp_min_num_params!r} must be >= 0.")
        self.fsdp_state_dict_type = str(self.fsdp_state_dict_type).upper()
        if self.fsdp_state_dict_type not in FSDP_STATE_DICT_TYPES:
            raise bad_value(
                "fsdp_config.fsdp_state_dict_type", self.fsdp_state_dict_type, FSDP_STATE_DICT_TYPES
            )
        if self.fsdp_backward_prefetch is not None:
            self.fsdp_backward_prefetch = str(self.fsdp_backward_prefetch).upper()
            if self.fsdp_backward_prefetch not in FSDP_BACKWARD_PREFETCH:
                raise bad_value(
                    "fsdp_config.fsdp_backward_prefetch", self.fsdp_backward_prefetch, FSDP_BACKWARD_PREFETCH
                )

    def layer_classes(self) -> list[str]:
        """The layer class names to wrap, from the comma-separated setting."""
        raw = self.fsdp_transformer_layer_cls_to_wrap or ""
        if isinstance(raw, (list, tuple)):
            return [str(name).strip() for name in raw if str(name).strip()]
        return [name.strip() for name in str(raw).split(",") if name.strip()]

    @property
    def reshard_after_forward(self) -> bool:
        """FULL_SHARD frees gathered parameters after forward; SHARD_GRAD_OP keeps them."""
        if self.fsdp_reshard_after_forward is not None:
            return bool(self.fsdp_reshard_after_forward)
        return self.fsdp_sharding_strategy != "SHARD_GRAD_OP"


@dataclass
class DeepSpeedConfig:
    """How DeepSpeed runs. Field names are Accelerate's `deepspeed_config` keys."""

    deepspeed_config_file: str | None = None
    zero_stage: int = 2
    offload_optimizer_device: str = "none"
    offload_param_device: str = "none"
    gradient_clipping: float | None = None
    gradient_accumulation_steps: int | None = None
    zero3_init_flag: bool = False
    zero3_save_16bit_model: bool = True
    deepspeed_multinode_launcher: str = "standard"

    def validate(self) -> None:
        if self.zero_stage not in ZERO_STAGES:
            raise bad_value(
                "deepspeed_config.zero_stage", self.zero_stage, ZERO_STAGES, "ZeRO has stages 0 to 3."
            )
        for name in ("offload_optimizer_device", "offload_param_device"):
            value = str(getattr(self, name)).lower()
            if value not in OFFLOAD_DEVICES:
                raise bad_value(f"deepspeed_config.{name}", value, OFFLOAD_DEVICES)
            setattr(self, name, value)
        if self.gradient_clipping is not None and float(self.gradient_clipping) <= 0:
            raise ConfigError(
                f"deepspeed_config.gradient_clipping={self.gradient_clipping!r} must be a positive number."
            )
        if self.gradient_accumulation_steps is not None and int(self.gradient_accumulation_steps) < 1:
            raise ConfigError(
                "deepspeed_config.gradient_accumulation_steps="
                f"{self.gradient_accumulation_steps!r} must be >= 1."
            )
        self.deepspeed_multinode_launcher = str(self.deepspeed_multinode_launcher).lower()
        if self.deepspeed_multinode_launcher not in DEEPSPEED_MULTINODE_LAUNCHERS:
            raise bad_value(
                "deepspeed_config.deepspeed_multinode_launcher",
                self.deepspeed_multinode_launcher,
                DEEPSPEED_MULTINODE_LAUNCHERS,
            )
        if self.zero3_init_flag and not self.deepspeed_config_file and self.zero_stage != 3:
            raise ConfigError(_zero3_init_needs_stage3(self.zero_stage, "deepspeed_config.zero_stage"))


@dataclass
class DynamoConfig:
    """torch.compile settings. Field names are Accelerate's `dynamo_config` keys; NO = do not compile."""

    dynamo_backend: str = "NO"
    dynamo_mode: str = "default"
    dynamo_use_fullgraph: bool = False
    dynamo_use_dynamic: bool | None = None
    dynamo_use_regional_compilation: bool = False

    def validate(self) -> None:
        self.dynamo_backend = str(self.dynamo_backend).upper()
        if self.dynamo_backend not in DYNAMO_BACKENDS:
            raise bad_value("dynamo_config.dynamo_backend", self.dynamo_backend, DYNAMO_BACKENDS)
        self.dynamo_mode = str(self.dynamo_mode or "default")
        if self.dynamo_mode not in DYNAMO_MODES:
            raise bad_value("dynamo_config.dynamo_mode", self.dynamo_mode, DYNAMO_MODES)

    @property
    def enabled(self) -> bool:
        return self.dynamo_backend != "NO"


def read_deepspeed_json(path: str) -> dict[str, Any]:
    """The DeepSpeed JSON config file as a dict; a missing, unparsable or impossible file is a ConfigError."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise ConfigError(f"DeepSpeed config file {path!r} does not exist; pass the path of a JSON file.")
    try:
        data = json.loads(file.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"DeepSpeed config file {path!r} is not valid JSON ({exc.msg} at line {exc.lineno}, column "
            f"{exc.colno}); fix the file, or leave deepspeed_config_file empty to use the deepspeed_config fields."
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"DeepSpeed config file {path!r} cannot be read ({exc}); pass a readable JSON file."
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"DeepSpeed config file {path!r} holds a JSON {type(data).__name__}; it must hold an object "
            '({"zero_optimization": {"stage": 2}, ...}).'
        )
    zero = data.get("zero_optimization", {})
    stage = zero.get("stage", "auto") if isinstance(zero, dict) else zero
    if stage != "auto" and (isinstance(stage, bool) or stage not in ZERO_STAGES):
        raise bad_value(
            f"zero_optimization.stage in DeepSpeed config file {path!r}",
            stage,
            ZERO_STAGES,
            "ZeRO has stages 0 to 3.",
        )
    return data


def check_strategy_sections(
    distributed_type: str | None, deepspeed: DeepSpeedConfig, num_machines: int = 1
) -> None:
    """Cross-section checks: FSDP and DeepSpeed cannot be combined; DeepSpeed settings must agree
    with each other and with the DeepSpeed JSON file, and be ones this launcher can apply."""
    ds_file = deepspeed.deepspeed_config_file
    if (
        distributed_type == "DEEPSPEED"
        and num_machines > 1
        and deepspeed.deepspeed_multinode_launcher != "standard"
    ):
        raise ConfigError(
            f"deepspeed_config.deepspeed_multinode_launcher={deepspeed.deepspeed_multinode_launcher!r}: "
            "notebook_launcher starts the ranks of every machine itself (torchrun, Accelerate's 'standard'), and "
            "cannot hand them to pdsh/MPI. Set it to 'standard' and start the launch on each machine."
        )
    if not ds_file:
        return
    if distributed_type == "FSDP":
        raise ConfigError(
            f"distributed_type='FSDP' with deepspeed_config.deepspeed_config_file={ds_file!r}: FSDP and DeepSpeed "
            "both shard the model and cannot be combined. Use distributed_type='DEEPSPEED' for the file, or drop "
            "the file to train with FSDP."
        )
    if distributed_type == "DEEPSPEED":
        check_file_agrees(deepspeed, read_deepspeed_json(ds_file))


def _zero3_init_needs_stage3(stage: object, where: str) -> str:
    return (
        f"deepspeed_config.zero3_init_flag=True builds models already partitioned for ZeRO stage 3, but {where} "
        f"is {stage!r}; set zero_stage 3, or zero3_init_flag False."
    )


def check_file_agrees(deepspeed: DeepSpeedConfig, data: dict[str, Any]) -> None:
    """A deepspeed_config field set next to a JSON file must say what the file says (or be left
    unset): otherwise one of the two would be silently ignored. Fields at their default count as unset."""
    source = f"DeepSpeed config file {deepspeed.deepspeed_config_file!r}"
    zero = data.get("zero_optimization")
    zero = zero if isinstance(zero, dict) else {}
    stage = zero.get("stage", 0)
    defaults = DeepSpeedConfig()
    pairs = [
        ("zero_stage", deepspeed.zero_stage, "zero_optimization.stage", stage),
        (
            "offload_optimizer_device",
            deepspeed.offload_optimizer_device,
            "zero_optimization.offload_optimizer.device",
            (zero.get("offload_optimizer") or {}).get("device", "none"),
        ),
        (
            "offload_param_device",
            deepspeed.offload_param_device,
            "zero_optimization.offload_param.device",
            (zero.get("offload_param") or {}).get("device", "none"),
        ),
    ]
    clipping = data.get("gradient_clipping", "auto")
    if deepspeed.gradient_clipping is not None and clipping != "auto":
        pairs.append(("gradient_clipping", float(deepspeed.gradient_clipping), "gradient_clipping", clipping))
    for field_name, ours, key, theirs in pairs:
        if ours == getattr(defaults, field_name) or theirs == "auto" or ours == theirs:
            continue
        raise ConfigError(
            f"deepspeed_config.{field_name}={ours!r} but {source} has {key}={theirs!r}; with a DeepSpeed file, set "
            f'{field_name} in the file (or write "auto" there) and leave deepspeed_config.{field_name} unset.'
        )
    if deepspeed.zero3_init_flag and stage not in (3, "auto"):
        raise ConfigError(_zero3_init_needs_stage3(stage, f"zero_optimization.stage in {source}"))
