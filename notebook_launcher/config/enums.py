"""Accelerate's enums (same names, same values): how a run is distributed and in which precision.

String enums, so `DistributedType.MULTI_CPU == "MULTI_CPU"` and config files hold plain strings.
The config's allowed values are read from here, so the two can never disagree.
"""

from __future__ import annotations

from enum import Enum


class _StrEnum(str, Enum):
    def __str__(self) -> str:
        return self.value


class DistributedType(_StrEnum):
    """How the run is distributed; compares equal to its plain string too ("MULTI_CPU")."""

    NO = "NO"
    MULTI_CPU = "MULTI_CPU"
    MULTI_GPU = "MULTI_GPU"
    FSDP = "FSDP"
    DEEPSPEED = "DEEPSPEED"


class PrecisionType(_StrEnum):
    """The mixed_precision values."""

    NO = "no"
    FP16 = "fp16"
    BF16 = "bf16"
    FP8 = "fp8"
