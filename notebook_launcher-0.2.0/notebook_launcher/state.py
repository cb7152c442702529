"""`accelerate.state`'s names: `from notebook_launcher.state import PartialState, AcceleratorState,
GradientState`. A thin, lazy face over the runtime (torch loads on first use)."""

from __future__ import annotations

from ._lazy import face

_LAZY = {
    **dict.fromkeys(
        ("AcceleratorState", "DistributedType", "GradientState", "PartialState"), "notebook_launcher.runtime"
    ),
    "is_initialized": "notebook_launcher.runtime.world.shared_state",
}
_UNSUPPORTED = {
    "ThreadLocalSharedDict": "an Accelerate internal; the state objects here are plain per-process singletons",
    "SharedDict": "an Accelerate internal; the state objects here are plain per-process singletons",
    "do_nothing": "an Accelerate internal (what on_main_process returns on other processes)",
}

__all__ = sorted(_LAZY)
__getattr__, __dir__ = face(__name__, globals(), _LAZY, _UNSUPPORTED)
