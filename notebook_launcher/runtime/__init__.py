"""WHAT runs inside each worker (or a plain script): the Accelerator (accelerator/facade.py with the
mixins process_api.py, control_api.py, saving_api.py, tracking_api.py, views.py, sharding_api.py;
its arguments in settings.py, configurations.py, plugins.py, kwargs.py), `init_empty_weights`
(big_modeling.py) and what it delegates to: the process state read from the env contract (world/:
state.py, shared_state.py), strategies/, precision/, compile.py, data/, ops.py, world/rng_sync.py,
checkpointing/ (checkpoint.py, naming.py, model_files.py), trackers/, memory.py, wrappers.py.

Imports config and errors only. Never launch, cli, widgets or IPython: workers must not need a
notebook. Imported by workers, scripts, and the public face (lazily)."""

from ..config.enums import DistributedType, PrecisionType
from .accelerator.configurations import (
    DataLoaderConfiguration,
    GradientAccumulationPlugin,
    ProjectConfiguration,
)
from .accelerator.control_api import skip_first_batches
from .accelerator.facade import Accelerator
from .accelerator.kwargs import (
    AutocastKwargs,
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    KwargsHandler,
    ProfileKwargs,
)
from .accelerator.plugins import (
    DeepSpeedPlugin,
    DynamoBackend,
    FullyShardedDataParallelPlugin,
    RNGType,
    TorchDynamoPlugin,
)
from .big_modeling import init_empty_weights, init_on_device
from .data import DataLoaderShard, GradientState
from .memory import find_executable_batch_size, release_memory
from .world.rng_sync import synchronize_rng_state, synchronize_rng_states
from .world.seed import set_seed
from .world.shared_state import AcceleratorState, PartialState
from .world.state import ProcessState, get_state, reset_state

__all__ = [
    "Accelerator",
    "AcceleratorState",
    "AutocastKwargs",
    "DataLoaderConfiguration",
    "DataLoaderShard",
    "DeepSpeedPlugin",
    "DistributedDataParallelKwargs",
    "DistributedType",
    "DynamoBackend",
    "FullyShardedDataParallelPlugin",
    "GradScalerKwargs",
    "GradientAccumulationPlugin",
    "GradientState",
    "InitProcessGroupKwargs",
    "KwargsHandler",
    "PartialState",
    "PrecisionType",
    "ProcessState",
    "ProfileKwargs",
    "ProjectConfiguration",
    "RNGType",
    "TorchDynamoPlugin",
    "find_executable_batch_size",
    "get_state",
    "init_empty_weights",
    "init_on_device",
    "release_memory",
    "reset_state",
    "set_seed",
    "skip_first_batches",
    "synchronize_rng_state",
    "synchronize_rng_states",
]
