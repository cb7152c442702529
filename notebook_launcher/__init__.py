"""notebook_launcher: train PyTorch models on many processes, GPUs and machines from a notebook.

The public face. Heavy pieces (torch, the widgets) load on first use, so `import notebook_launcher`
in a kernel is cheap and never initialises CUDA. It also answers to Accelerate's top-level names
(`from notebook_launcher import Accelerator, PartialState, notebook_launcher, ...`); the
`accelerate.utils` and `accelerate.state` names live in notebook_launcher.utils / .state.
"""

from __future__ import annotations

from typing import Any

from ._lazy import face
from ._version import __version__ as __version__
from .cluster_runner import set_cluster_runner
from .config import DeepSpeedConfig, FSDPConfig, LaunchConfig, load_config, save_config
from .errors import (
    AcceleratorError,
    AcceleratorValueError,
    ClusterEnvironmentError,
    ConfigError,
    DistributedOperationException,
    HardwareError,
    NetworkError,
    NotebookLauncherError,
    WorkerWidgetError,
)
from .view_factory import set_view_factory

_RUNTIME = "notebook_launcher.runtime"
_LAZY = {
    **dict.fromkeys(
        (
            "AcceleratorState",
            "DataLoaderConfiguration",
            "DeepSpeedPlugin",
            "FullyShardedDataParallelPlugin",
            "GradientAccumulationPlugin",
            "GradientState",
            "PartialState",
            "ProfileKwargs",
            "ProjectConfiguration",
            "find_executable_batch_size",
            "skip_first_batches",
            "synchronize_rng_states",
        ),
        _RUNTIME,
    ),
    "notebook_launcher": "notebook_launcher.launch.accelerate_launcher",
    "debug_launcher": "notebook_launcher.launch.accelerate_launcher",
    "Accelerator": "notebook_launcher.runtime",
    "DistributedType": "notebook_launcher.config.enums",
    "PrecisionType": "notebook_launcher.config.enums",
    "LoggerType": "notebook_launcher.config.enums",
    "DDPCommunicationHookType": "notebook_launcher.config.enums",
    "GeneralTracker": "notebook_launcher.runtime.trackers",
    "DistributedDataParallelKwargs": "notebook_launcher.runtime",
    "GradScalerKwargs": "notebook_launcher.runtime",
    "AutocastKwargs": "notebook_launcher.runtime",
    "InitProcessGroupKwargs": "notebook_launcher.runtime",
    "set_seed": "notebook_launcher.runtime",
    "init_empty_weights": "notebook_launcher.runtime",
    "init_on_device": "notebook_launcher.runtime",
    "notebook_launch": "notebook_launcher.launch",
    "ParallelismConfig": "notebook_launcher.config.parallelism",
    "estimate_memory": "notebook_launcher.estimate.memory_estimate",
    "start_launch": "notebook_launcher.launch",
    "release_warm_pool": "notebook_launcher.launch",
    "RunHandle": "notebook_launcher.launch",
    "LaunchResult": "notebook_launcher.launch",
    "WorkerError": "notebook_launcher.launch",
    "LaunchTimeout": "notebook_launcher.launch",
    "LaunchInterrupted": "notebook_launcher.launch",
    "RendezvousStalled": "notebook_launcher.launch",
    "LaunchStopped": "notebook_launcher.launch",
    "LaunchPreempted": "notebook_launcher.launch",
    "RayCluster": "notebook_launcher.clusters",
    "SlurmCluster": "notebook_launcher.clusters",
    "Ranks": "notebook_launcher.interactive",
    "RankError": "notebook_launcher.interactive",
    "RanksBroken": "notebook_launcher.interactive",
    "ConfigPanel": "notebook_launcher.widgets",
    "RunView": "notebook_launcher.widgets",
}

__all__ = [
    "AcceleratorError",
    "AcceleratorValueError",
    "ClusterEnvironmentError",
    "ConfigError",
    "DeepSpeedConfig",
    "DistributedOperationException",
    "FSDPConfig",
    "HardwareError",
    "LaunchConfig",
    "NetworkError",
    "NotebookLauncherError",
    "WorkerWidgetError",
    "load_config",
    "load_ipython_extension",
    "save_config",
    "unload_ipython_extension",
    *_LAZY,
]


_BIG_MODEL = (
    "big-model inference (device maps, offloading) is not supported; load with transformers' device_map"
)
_UNSUPPORTED = {
    **dict.fromkeys(
        (
            "cpu_offload",
            "cpu_offload_with_hook",
            "disk_offload",
            "dispatch_model",
            "load_checkpoint_and_dispatch",
            "infer_auto_device_map",
            "load_checkpoint_in_model",
        ),
        _BIG_MODEL,
    ),
    "is_rich_available": "rich tracebacks are not used; worker tracebacks come back to the notebook as they are",
    "rich": "rich tracebacks are not used; worker tracebacks come back to the notebook as they are",
}


def _shown_run_view() -> Any:
    """What `view=True` asks the launcher for: a new RunView, shown in the current cell."""
    from IPython.display import display

    from .widgets import RunView

    shown = RunView()
    display(shown)  # type: ignore[no-untyped-call]
    return shown


set_view_factory(_shown_run_view)


def _run_on_cluster(*args: Any, **kwargs: Any) -> Any:
    """What a launch with cluster= calls: clusters/launching.py, imported only now (cluster_runner.py)."""
    from .clusters.launching import cluster_run

    return cluster_run(*args, **kwargs)


set_cluster_runner(_run_on_cluster)


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext notebook_launcher` registers the %ranks / %%ranks magics (see Ranks)."""
    from .interactive.magic import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """`%unload_ext notebook_launcher` stops the ranks the magics started."""
    from .interactive.magic import unload_ipython_extension as unload

    unload(ipython)


__getattr__, __dir__ = face(__name__, globals(), _LAZY, _UNSUPPORTED)
