"""Accelerate's `write_basic_config()`: a config file for this machine, from what it has (its GPUs,
or one CPU process), without asking. `notebook-launcher config default` writes the same."""

from __future__ import annotations

import os
from pathlib import Path

from ..system.hardware import detect
from .files import default_config_path, save_config
from .launch_config import LaunchConfig


def basic_config(mixed_precision: str = "no") -> LaunchConfig:
    """One process per GPU (MULTI_GPU when there are several), or one CPU process (use_cpu)."""
    gpus = detect().cuda_device_count
    processes = max(gpus, 1)
    return LaunchConfig(
        num_processes=processes,
        distributed_type="MULTI_GPU" if processes > 1 else "NO",
        use_cpu=gpus == 0,
        mixed_precision=str(getattr(mixed_precision, "value", mixed_precision)).lower(),
    )


def write_basic_config(
    mixed_precision: str = "no", save_location: str | os.PathLike[str] | None = None
) -> Path | bool:
    """Write basic_config() to save_location (default: the file notebook_launch, the CLI and the
    ConfigPanel read) and return its path; an existing file is left alone: False, as Accelerate."""
    path = Path(save_location).expanduser() if save_location is not None else default_config_path()
    if path.exists():
        print(
            f"Configuration already exists at {path}, will not override. Run `notebook-launcher config` or "
            "pass another save_location."
        )
        return False
    return save_config(basic_config(mixed_precision), path)
