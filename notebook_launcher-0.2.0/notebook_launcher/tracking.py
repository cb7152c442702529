"""Accelerate's `accelerate.tracking` import path: `from notebook_launcher.tracking import
GeneralTracker, on_main_process, register_tracker_class, ...` works as it does there. The trackers
live in runtime/trackers/; this module re-exports that room's public names, listed once in its
`__all__` (importing it imports the runtime)."""

from .runtime.trackers import *  # noqa: F403
from .runtime.trackers import __all__ as __all__
