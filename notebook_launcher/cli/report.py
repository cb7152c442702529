"""`notebook-launcher env`: what a bug report needs — versions, platform, hardware, the config.

It never fails because of a bad config file: the problem is reported in the output instead, since
that is often exactly what the bug report is about.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
from typing import Any

from ..errors import NotebookLauncherError
from ..records.names import CONFIG_FILE_ENV

PACKAGES = (
    "notebook_launcher",
    "torch",
    "cloudpickle",
    "pyyaml",
    "ipywidgets",
    "numpy",
    "deepspeed",
    "torchao",
)
ENV_VARS = (
    CONFIG_FILE_ENV,
    "XDG_CONFIG_HOME",
    "OMP_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
    "TORCH_DISTRIBUTED_DEBUG",
    "NCCL_DEBUG",
    "MASTER_ADDR",
    "MASTER_PORT",
)


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _torch_facts() -> list[tuple[str, str]]:
    import torch
    import torch.distributed as dist

    backends = [
        name for name, ok in (("gloo", dist.is_gloo_available()), ("nccl", dist.is_nccl_available())) if ok
    ]
    return [
        ("torch CUDA build", str(torch.version.cuda or "none (CPU build)")),
        (
            "torch distributed",
            ("available: " + ", ".join(backends)) if dist.is_available() else "not available",
        ),
    ]


def _hardware_lines(hardware: Any) -> list[tuple[str, str]]:
    rows = [("CPUs usable", str(hardware.cpu_count))]
    if hardware.gpus:
        for gpu in hardware.gpus:
            memory = gpu.total_memory / 2**30
            rows.append(
                (
                    f"GPU {gpu.index}",
                    f"{gpu.name}, {memory:.1f} GiB, compute capability {gpu.capability[0]}.{gpu.capability[1]}",
                )
            )
    else:
        rows.append(("GPUs", "none visible"))
    rows.append(("MPS", "available" if hardware.mps_available else "not available"))
    usable = [mode for mode, reason in hardware.supported_precisions().items() if reason is None]
    rows.append(("mixed precision usable", ", ".join(usable)))
    return rows


def _config_lines(config_file: str | None) -> list[str]:
    import yaml

    from ..config import to_file_dict
    from .resolve import read_config_file

    try:
        config, source = read_config_file(config_file)
    except NotebookLauncherError as exc:
        return [f"Config: could not be read: {exc}"]
    from ..config import default_config_path

    header = f"Config ({source.describe()}; default location {default_config_path()}):"
    body = yaml.safe_dump(to_file_dict(config), sort_keys=False).rstrip().splitlines()
    return [header, *("    " + line for line in body)]


def env_report(config_file: str | None = None) -> str:
    """The report as text, one `- key: value` line per fact, ready to paste into an issue."""
    from ..system.hardware import detect

    rows: list[tuple[str, str]] = [(f"{name} version", _version(name)) for name in PACKAGES]
    rows += [
        ("Python", f"{platform.python_version()} ({sys.executable})"),
        ("Platform", platform.platform()),
    ]
    rows += _torch_facts()
    rows += _hardware_lines(detect())
    rows += [(f"${name}", os.environ[name]) for name in ENV_VARS if name in os.environ]
    lines = ["Copy-and-paste the text below in your GitHub issue", ""]
    lines += [f"- {key}: {value}" for key, value in rows]
    lines += ["", *_config_lines(config_file)]
    return "\n".join(lines)
