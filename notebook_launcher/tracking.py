"""Accelerate's `accelerate.tracking` import path: `from notebook_launcher.tracking import
GeneralTracker, on_main_process, register_tracker_class, ...` works as it does there. The trackers
live in runtime/trackers/; this module only names them (importing it imports the runtime)."""

from .runtime.trackers import (
    LOGGER_TYPE_TO_CLASS,
    AimTracker,
    ClearMLTracker,
    CometMLTracker,
    DVCLiveTracker,
    GeneralTracker,
    MLflowTracker,
    SwanLabTracker,
    TensorBoardTracker,
    TrackioTracker,
    WandBTracker,
    filter_trackers,
    get_available_trackers,
    on_main_process,
    register_tracker_class,
)

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
    "on_main_process",
    "register_tracker_class",
]
