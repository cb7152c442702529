"""notebook_launcher: train PyTorch models on many processes, GPUs and machines from a notebook.

The public face. Heavy pieces (torch, the widgets) load on first use, so `import notebook_launcher`
in a kernel is cheap and never initialises CUDA.
"""

from __future__ import annotations

import importlib
from typing import Any

from .config import DeepSpeedConfig, FSDPConfig, LaunchConfig, load_config, save_config
from .errors import (
    AcceleratorError,
    ClusterEnvironmentError,
    ConfigError,
    DistributedOperationException,
    HardwareError,
    NetworkError,
    NotebookLauncherError,
)

__version__ = "0.1.0"

_LAZY = {
    "Accelerator": "notebook_launcher.runtime",
    "DistributedType": "notebook_launcher.config.enums",
    "PrecisionType": "notebook_launcher.config.enums",
    "LoggerType": "notebook_launcher.config.enums",
    "GeneralTracker": "notebook_launcher.runtime.trackers",
    "DistributedDataParallelKwargs": "notebook_launcher.runtime",
    "GradScalerKwargs": "notebook_launcher.runtime",
    "AutocastKwargs": "notebook_launcher.runtime",
    "InitProcessGroupKwargs": "notebook_launcher.runtime",
    "set_seed": "notebook_launcher.runtime",
    "notebook_launch": "notebook_launcher.launch",
    "start_launch": "notebook_launcher.launch",
    "RunHandle": "notebook_launcher.launch",
    "LaunchResult": "notebook_launcher.launch",
    "WorkerError": "notebook_launcher.launch",
    "LaunchTimeout": "notebook_launcher.launch",
    "LaunchStopped": "notebook_launcher.launch",
    "RayCluster": "notebook_launcher.clusters",
    "SlurmCluster": "notebook_launcher.clusters",
    "ConfigPanel": "notebook_launcher.widgets",
    "RunView": "notebook_launcher.widgets",
}

__all__ = [
    "AcceleratorError",
    "ClusterEnvironmentError",
    "ConfigError",
    "DeepSpeedConfig",
    "DistributedOperationException",
    "FSDPConfig",
    "HardwareError",
    "LaunchConfig",
    "NetworkError",
    "NotebookLauncherError",
    "load_config",
    "save_config",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'notebook_launcher' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
