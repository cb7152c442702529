"""WHAT runs inside each worker (or a plain script): the Accelerator facade (accelerator.py with
process_api.py, saving_api.py and tracking_api.py) and what it delegates to: the process state read
from the env contract (state.py), strategies/, precision.py, data/, ops.py, checkpoint.py,
trackers/, wrappers.py.

Imports config and errors only. Never launch, cli, widgets or IPython: workers must not need a
notebook. Imported by workers, scripts, and the public face (lazily)."""

from ..config.enums import DistributedType
from .accelerator import Accelerator
from .data import DataLoaderShard, GradientState
from .kwargs import (
    AutocastKwargs,
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
)
from .seed import set_seed
from .state import ProcessState, get_state, reset_state

__all__ = [
    "Accelerator",
    "AutocastKwargs",
    "DataLoaderShard",
    "DistributedDataParallelKwargs",
    "DistributedType",
    "GradScalerKwargs",
    "GradientState",
    "InitProcessGroupKwargs",
    "ProcessState",
    "get_state",
    "reset_state",
    "set_seed",
]
