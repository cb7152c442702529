"""Experiment trackers with Accelerate's names (accelerate.tracking): GeneralTracker and its
`on_main_process` rule (base.py), the built-in trackers (one module each), and which of them
`log_with=` picks (registry.py). The Accelerator uses them through runtime/accelerator/tracking_api.py.

A tracker library is imported only when its tracker starts, so a missing package costs nothing.
Part of the runtime: imports config and errors only.
"""

from .aim_tracker import AimTracker
from .base import GeneralTracker, on_main_process
from .clearml_tracker import ClearMLTracker
from .comet_tracker import CometMLTracker
from .dvclive_tracker import DVCLiveTracker
from .mlflow_tracker import MLflowTracker
from .registry import (
    LOGGER_TYPE_TO_CLASS,
    filter_trackers,
    get_available_trackers,
    is_tracker_available,
    register_tracker_class,
)
from .swanlab_tracker import SwanLabTracker
from .tensorboard_tracker import TensorBoardTracker
from .trackio_tracker import TrackioTracker
from .wandb_tracker import WandBTracker

__all__ = [
    "LOGGER_TYPE_TO_CLASS",
    "AimTracker",
    "ClearMLTracker",
    "CometMLTracker",
    "DVCLiveTracker",
    "GeneralTracker",
    "MLflowTracker",
    "SwanLabTracker",
    "TensorBoardTracker",
    "TrackioTracker",
    "WandBTracker",
    "filter_trackers",
    "get_available_trackers",
    "is_tracker_available",
    "on_main_process",
    "register_tracker_class",
]
