"""Which trackers exist, which are installed, and what `log_with=` asks for (Accelerate's rules).

`log_with` takes a name, a LoggerType, a GeneralTracker instance, a list of those, or "all" (every
installed built-in, plus the instances given). A built-in whose package is missing is left out and
reported by name, so the Accelerator can say so in one line; an unknown name is an error.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import warnings
from typing import Any

from ...config.enums import LoggerType
from ...errors import ConfigError, closest
from .aim_tracker import AimTracker
from .base import BuiltinTracker, GeneralTracker
from .clearml_tracker import ClearMLTracker
from .comet_tracker import CometMLTracker
from .dvclive_tracker import DVCLiveTracker
from .mlflow_tracker import MLflowTracker
from .swanlab_tracker import SwanLabTracker
from .tensorboard_tracker import TensorBoardTracker
from .trackio_tracker import TrackioTracker
from .wandb_tracker import WandBTracker

# the built-in trackers, in the order Accelerate lists the available ones
BUILT_IN: tuple[type[BuiltinTracker], ...] = (
    TensorBoardTracker,
    WandBTracker,
    CometMLTracker,
    AimTracker,
    MLflowTracker,
    ClearMLTracker,
    DVCLiveTracker,
    SwanLabTracker,
    TrackioTracker,
)
_BUILT_IN_BY_NAME = {cls.name: cls for cls in BUILT_IN}
LOGGER_TYPE_TO_CLASS: dict[str, type[GeneralTracker]] = dict(_BUILT_IN_BY_NAME)


def package_for(name: str) -> str:
    """The pip package a built-in tracker needs (for messages)."""
    return _BUILT_IN_BY_NAME[name].packages[0][1][0]


def is_tracker_available(name: str) -> bool:
    """Installed, checked without importing it: a folder named `wandb` in the cwd does not count."""
    cls = _BUILT_IN_BY_NAME.get(name)
    if cls is None:
        return False
    for module, distributions in cls.packages:
        if importlib.util.find_spec(module) is None:
            continue
        for dist in distributions:
            try:
                found = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                continue
            return cls.supports_version(found)
    return False


def get_available_trackers() -> list[LoggerType]:
    """The built-in trackers whose package is installed, in Accelerate's order."""
    return [LoggerType(cls.name) for cls in BUILT_IN if is_tracker_available(cls.name)]


def register_tracker_class(tracker_class: type[GeneralTracker]) -> None:
    """Make a GeneralTracker subclass usable by its `name` in `log_with`, like a built-in."""
    if not (isinstance(tracker_class, type) and issubclass(tracker_class, GeneralTracker)):
        raise ConfigError(f"register_tracker_class({tracker_class!r}): pass a subclass of GeneralTracker.")
    if not getattr(tracker_class, "name", None):
        raise ConfigError(
            f"{tracker_class.__name__} needs a non-empty `name` class attribute to be registered."
        )
    if not hasattr(tracker_class, "requires_logging_directory"):
        raise ConfigError(
            f"{tracker_class.__name__} needs a `requires_logging_directory` class attribute (True when it "
            "writes into the logging directory)."
        )
    if tracker_class.name in LOGGER_TYPE_TO_CLASS:
        warnings.warn(
            f"A tracker named {tracker_class.name!r} is already registered; {tracker_class.__name__} replaces it.",
            stacklevel=2,
        )
    LOGGER_TYPE_TO_CLASS[tracker_class.name] = tracker_class


def resolve_log_with(
    log_with: Any, logging_dir: str | os.PathLike[str] | None
) -> tuple[list[LoggerType | str | GeneralTracker], list[str]]:
    """(trackers to use, built-in names left out because their package is missing)."""
    if log_with is None:
        return [], []
    entries = list(log_with) if isinstance(log_with, (list, tuple)) else [log_with]
    instances: list[LoggerType | str | GeneralTracker] = [e for e in entries if isinstance(e, GeneralTracker)]
    if any(_is_all(e) for e in entries):
        return instances + get_available_trackers(), []
    chosen: list[LoggerType | str | GeneralTracker] = []
    missing: list[str] = []
    for entry in entries:
        if isinstance(entry, GeneralTracker):
            chosen.append(entry)
            continue
        name = _name_of(entry)
        if name in chosen or name in missing:
            continue
        if name in LoggerType and not is_tracker_available(name):
            missing.append(name)
            continue
        if LOGGER_TYPE_TO_CLASS[name].requires_logging_directory and logging_dir is None:
            raise ConfigError(  # Accelerate's sentence first (its tests and users match it), then the fix
                f"Logging with `{name}` requires a `logging_dir` to be passed in: pass "
                "Accelerator(project_dir=...) or project_config=ProjectConfiguration(logging_dir=...)."
            )
        chosen.append(LoggerType(name) if name in LoggerType else name)
    return chosen, missing


def filter_trackers(
    log_with: Any, logging_dir: str | os.PathLike[str] | None = None
) -> list[LoggerType | str | GeneralTracker]:
    """Accelerate's filter_trackers: the usable trackers of `log_with` (missing packages left out)."""
    return resolve_log_with(log_with, logging_dir)[0]


def _is_all(entry: Any) -> bool:
    return isinstance(entry, str) and str(entry) == LoggerType.ALL.value


def _name_of(entry: Any) -> str:
    if isinstance(entry, type) and issubclass(entry, GeneralTracker):
        raise ConfigError(
            f"log_with got the class {entry.__name__}; pass an instance ({entry.__name__}(...)), or "
            "register the class with register_tracker_class and pass its name."
        )
    name = str(entry) if isinstance(entry, str) else None
    if name is None or name not in LOGGER_TYPE_TO_CLASS:
        known = [t.value for t in LoggerType] + [n for n in LOGGER_TYPE_TO_CLASS if n not in LoggerType]
        hint = closest(name, known) if name else ""
        raise ConfigError(
            f"log_with={entry!r} is not a tracker; use one of {known}, a GeneralTracker instance, or a "
            f"list of those.{hint}"
        )
    return name
