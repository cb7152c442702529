"""GeneralTracker: Accelerate's base class for an experiment tracker, with its names and meaning.

A tracker has a `name`, says whether it `requires_logging_directory`, exposes the library's own
object as `tracker`, and implements `start`, `store_init_configuration`, `log` and `finish`.
Methods decorated with `on_main_process` run on the main process only when the tracker's
`main_process_only` is True (the default), as in Accelerate.

Beyond Accelerate, two optional methods let a checkpoint carry the tracker's run: `run_state()`
says which run this is (JSON-able, saved by `save_state`) and `continue_run(state)` makes the
tracker log into that run again (called by `load_state`, before or after `init_trackers`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import torch

F = TypeVar("F", bound=Callable[..., Any])


def _is_main_process() -> bool:
    """Whether this is the main process, creating the process state on first use (as PartialState())."""
    from ..world.state import get_state

    return get_state().is_main_process


def on_main_process(function: F) -> F:
    """Run a tracker method on the main process only when `self.main_process_only` is True.

    Decided at call time, so building a tracker never creates the process state (as Accelerate).
    """

    @functools.wraps(function)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(self, "main_process_only", False) and not _is_main_process():
            return None
        return function(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


class GeneralTracker:
    """Base class of every tracker; subclass it for a custom one and pass an instance to `log_with`.

    Subclasses define `name` (str), `requires_logging_directory` (bool) and a `tracker` property
    (the library's run object); `__init__` checks they are there, naming what is missing.
    """

    main_process_only = True

    def __init__(self, _blank: bool = False) -> None:
        if _blank:
            return
        missing = [attr for attr in ("name", "requires_logging_directory") if not hasattr(self, attr)]
        if "tracker" not in dir(self):
            missing.append("tracker")
        if missing:
            raise NotImplementedError(
                f"{type(self).__name__} is missing the required attribute(s) "
                f"{', '.join(f'`{m}`' for m in missing)}; define them in the class body "
                "(`tracker` as a @property returning the library's run object)."
            )

    def start(self) -> None:
        """Open the run; called by `Accelerator.init_trackers` (lazily, after the process state exists)."""

    def store_init_configuration(self, values: dict) -> None:
        """Record `values` as the run's hyperparameters (bool, str, float, int or None values)."""

    def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        """Log `values` (str, float or int) to the run, at `step` when given."""

    def finish(self) -> None:
        """Close the run (flush, end); trackers without such a step keep this no-op."""

    # ---- beyond Accelerate: a checkpoint carries the run so a resumed training continues it
    def run_state(self) -> dict | None:
        """Which run this tracker writes to, as JSON-able data saved by `save_state` (None: nothing)."""
        return None

    def continue_run(self, state: dict) -> None:
        """Log into the run `run_state()` described; before `start()` it only records the wish."""


class ResumableTracker(GeneralTracker):
    """A built-in tracker that can continue a saved run.

    `continue_run` before `start()` records the run, and `start()` opens it. After `start()` (the
    order Accelerate's examples use: `init_trackers`, then `load_state`) the run `start()` opened is
    closed, and dropped where the library allows it when nothing was logged to it, then the saved run
    is opened. Subclasses set `_started` in `start()`, `_logged` in `log()`, and implement `_close_fresh_run`.
    """

    _resume: dict | None = None
    _started = False
    _logged = False

    @on_main_process
    def continue_run(self, state: dict) -> None:
        self._resume = dict(state)
        if self._started:
            self._close_fresh_run(discard=not self._logged)
            self._started = self._logged = False
            self.start()

    def _close_fresh_run(self, discard: bool) -> None:
        raise NotImplementedError


def plain_values(values: dict) -> dict:
    """One-element tensors and numpy scalars become Python numbers, so every tracker can store them
    (Accelerate hands `log({"loss": loss})`'s tensor on as-is, and MLflow then drops it)."""
    return {key: _plain(value) for key, value in values.items()}


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return plain_values(value)
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    if type(value).__module__ == "numpy" and getattr(value, "size", 0) == 1:
        return value.item()  # numpy scalar or one-element array
    return value
