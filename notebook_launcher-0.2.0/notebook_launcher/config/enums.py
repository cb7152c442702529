"""Accelerate's enums (same names, same values): how a run is distributed, in which precision, and
which experiment trackers it logs to.

String enums, so `DistributedType.MULTI_CPU == "MULTI_CPU"` and config files hold plain strings.
The config's allowed values are read from here, so the two can never disagree.
"""

from __future__ import annotations

from enum import Enum, EnumMeta


class _StrEnum(str, Enum):
    def __str__(self) -> str:
        return self.value


class DistributedType(_StrEnum):
    """How the run is distributed; compares equal to its plain string too ("MULTI_CPU").

    Every member Accelerate 1.x has, so code that compares with `DistributedType.XLA` or
    `MULTI_NPU` runs; a run here is only ever one of RUNNABLE_DISTRIBUTED_TYPES.
    """

    NO = "NO"
    MULTI_CPU = "MULTI_CPU"
    MULTI_GPU = "MULTI_GPU"
    MULTI_NPU = "MULTI_NPU"
    MULTI_MLU = "MULTI_MLU"
    MULTI_SDAA = "MULTI_SDAA"
    MULTI_MUSA = "MULTI_MUSA"
    MULTI_XPU = "MULTI_XPU"
    DEEPSPEED = "DEEPSPEED"
    FSDP = "FSDP"
    XLA = "XLA"
    MEGATRON_LM = "MEGATRON_LM"
    MULTI_HPU = "MULTI_HPU"
    MULTI_NEURON = "MULTI_NEURON"


# the distributed types a run here can have (the others exist to be compared with, as in Accelerate)
RUNNABLE_DISTRIBUTED_TYPES = (
    DistributedType.NO,
    DistributedType.MULTI_CPU,
    DistributedType.MULTI_GPU,
    DistributedType.FSDP,
    DistributedType.DEEPSPEED,
)


class PrecisionType(_StrEnum):
    """The mixed_precision values."""

    NO = "no"
    FP16 = "fp16"
    BF16 = "bf16"
    FP8 = "fp8"


class DDPCommunicationHookType(_StrEnum):
    """A DDP communication hook (DistributedDataParallelKwargs comm_hook / comm_wrapper)."""

    NO = "no"
    FP16 = "fp16"
    BF16 = "bf16"
    POWER_SGD = "power_sgd"
    BATCHED_POWER_SGD = "batched_power_sgd"


class _ContainsByValue(EnumMeta):
    """`"wandb" in LoggerType` is True, as with Accelerate's enums (plain Enum would raise TypeError)."""

    def __contains__(cls, item: object) -> bool:
        try:
            cls(item)
        except ValueError:
            return False
        return True


class LoggerType(_StrEnum, metaclass=_ContainsByValue):
    """The experiment trackers `Accelerator(log_with=...)` knows by name; ALL = every installed one."""

    ALL = "all"
    AIM = "aim"
    TENSORBOARD = "tensorboard"
    WANDB = "wandb"
    TRACKIO = "trackio"
    COMETML = "comet_ml"
    MLFLOW = "mlflow"
    CLEARML = "clearml"
    DVCLIVE = "dvclive"
    SWANLAB = "swanlab"

    @classmethod
    def list(cls) -> list[str]:
        return [member.value for member in cls]
