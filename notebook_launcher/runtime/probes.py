"""Accelerate's environment helpers and `is_*_available` probes (`accelerate.utils` names), so code
that branches on them runs unchanged: a package probe says whether the package can be imported
(without importing it), a device probe whether this machine has that accelerator. Devices we do not
run on (TPU/XLA, HPU, NPU, MLU, SDAA, MUSA, XPU, Neuron) answer False, which sends such code down
its CUDA/CPU branch.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import torch


def str_to_bool(value: str, to_bool: bool = False) -> int | bool:
    """'y/yes/t/true/on/1' -> 1 (True), 'n/no/f/false/off/0' -> 0 (False), as Accelerate's."""
    lowered = value.lower()
    if lowered in ("y", "yes", "t", "true", "on", "1"):
        return True if to_bool else 1
    if lowered in ("n", "no", "f", "false", "off", "0"):
        return False if to_bool else 0
    raise ValueError(f"invalid truth value {value!r}; use one of y/yes/t/true/on/1 or n/no/f/false/off/0")


def parse_flag_from_env(key: str, default: bool = False) -> bool:
    """The boolean an environment variable spells (ACCELERATE_USE_CPU=true), else default."""
    value = os.environ.get(key, str(default))
    try:
        return str_to_bool(value) == 1
    except ValueError as error:
        raise ValueError(f"{key}: {error}") from None


def parse_choice_from_env(key: str, default: str = "no") -> str:
    """The variable's value as given, or `default` (Accelerate's helper for choice-valued flags)."""
    return os.environ.get(key, str(default))


def get_int_from_env(env_keys: list[str], default: int) -> int:
    """The first of env_keys set to a non-negative integer, else default."""
    for key in env_keys:
        value = int(os.environ.get(key, -1))
        if value >= 0:
            return value
    return default


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _package_probe(module: str):
    def probe(*args: Any, **kwargs: Any) -> bool:
        return _importable(module)

    probe.__doc__ = f"Whether {module} can be imported here."
    return probe


def _never(*args: Any, **kwargs: Any) -> bool:
    """A device or integration notebook_launcher does not run on: False here."""
    return False


def is_mps_available(min_version: str = "1.12") -> bool:
    """Whether Apple's MPS device is usable in this torch."""
    return bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())


def is_fp16_available() -> bool:
    """fp16 mixed precision: always offered (on CPU autocast runs it, with a grad scaler)."""
    return True


def is_fp8_available() -> bool:
    """fp8 training: available when torchao (the fp8 extra) is installed."""
    return _importable("torchao")


def is_rocm_available() -> bool:
    """Whether this torch is a ROCm build (its GPUs answer as CUDA)."""
    return torch.version.hip is not None


def get_torch_accelerator_backend(check_available: bool = True) -> tuple[str | None, Any]:
    """(device type, its torch module) of this machine's accelerator, or (None, None) on CPU.
    Counts GPUs without initialising CUDA (safe before a fork), as Accelerate's does."""
    from ..system.hardware import cuda_device_count

    count = cuda_device_count()  # -1: NVML could not tell; then ask torch
    if count > 0 or (count < 0 and torch.cuda.is_available()) or (not check_available and torch.version.cuda):
        return "cuda", torch.cuda
    if is_mps_available():
        return "mps", torch.mps
    return None, None


_PACKAGES = {
    "is_aim_available": "aim",
    "is_boto3_available": "boto3",
    "is_clearml_available": "clearml",
    "is_comet_ml_available": "comet_ml",
    "is_datasets_available": "datasets",
    "is_dvclive_available": "dvclive",
    "is_lomo_available": "lomo_optim",
    "is_matplotlib_available": "matplotlib",
    "is_mlflow_available": "mlflow",
    "is_pandas_available": "pandas",
    "is_peft_available": "peft",
    "is_pynvml_available": "pynvml",
    "is_pytest_available": "pytest",
    "is_rich_available": "rich",
    "is_schedulefree_available": "schedulefree",
    "is_swanlab_available": "swanlab",
    "is_tensorboard_available": "tensorboard",
    "is_timm_available": "timm",
    "is_torchdata_available": "torchdata",
    "is_torchvision_available": "torchvision",
    "is_trackio_available": "trackio",
    "is_transformers_available": "transformers",
    "is_triton_available": "triton",
    "is_wandb_available": "wandb",
    "is_amdsmi_available": "amdsmi",
    "is_import_timer_available": "import_timer",
}
_NEVER = (
    "is_torch_xla_available",
    "is_hpu_available",
    "is_habana_gaudi1",
    "is_npu_available",
    "is_mlu_available",
    "is_sdaa_available",
    "is_musa_available",
    "is_xpu_available",
    "is_neuron_available",
    "is_xccl_available",
    "is_megatron_lm_available",
    "is_sagemaker_available",
    "is_transformer_engine_available",
    "is_transformer_engine_mxfp8_available",
    "is_bnb_available",
    "is_4bit_bnb_available",
    "is_8bit_bnb_available",
    "is_bitsandbytes_multi_backend_available",
    "is_torchdata_stateful_dataloader_available",
)
globals().update({name: _package_probe(module) for name, module in _PACKAGES.items()})
globals().update(dict.fromkeys(_NEVER, _never))

PROBE_NAMES = (
    *_PACKAGES,
    *_NEVER,
    "is_mps_available",
    "is_fp16_available",
    "is_fp8_available",
    "is_rocm_available",
    "get_torch_accelerator_backend",
    "str_to_bool",
    "parse_flag_from_env",
    "parse_choice_from_env",
    "get_int_from_env",
)
