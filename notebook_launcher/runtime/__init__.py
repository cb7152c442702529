"""What runs inside each worker: the Accelerator and the pieces it delegates to."""

from .accelerator import Accelerator
from .data import DataLoaderShard, GradientState
from .kwargs import (
    AutocastKwargs,
    DistributedDataParallelKwargs,
    DistributedType,
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
