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
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, TypeVar

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
    # declared, not set: each subclass defines them (`__init__` checks, as Accelerate)
    name: str
    requires_logging_directory: bool

    if TYPE_CHECKING:

        @property
        def tracker(self) -> Any: ...

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


class BuiltinTracker(GeneralTracker):
    """What every built-in tracker shares, so each module keeps only what differs.

    A subclass names its library (`packages`, read by registry.py), the attribute Accelerate calls
    its run object (`handle`: "writer", "run", ...) and the method that ends that object
    (`closes_with`), and implements `_write` (one `log` call).
    """

    # (import name, distribution names) pairs; installed when one pair is found
    packages: ClassVar[tuple[tuple[str, tuple[str, ...]], ...]] = ()
    handle: ClassVar[str] = "run"
    closes_with: ClassVar[str] = "finish"
    _logged = False

    def __init__(self, run_name: str | None, **kwargs: Any) -> None:
        super().__init__()
        self.run_name = run_name
        self.init_kwargs = kwargs

    @classmethod
    def supports_version(cls, version: str) -> bool:
        """Whether this installed version of the library is one Accelerate supports."""
        return True

    @property
    def tracker(self) -> Any:
        return getattr(self, self.handle)

    @on_main_process
    def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        self._write(values, step, **kwargs)
        self._logged = True

    @on_main_process
    def finish(self) -> None:
        self._end()

    def _end(self) -> None:
        getattr(self.tracker, self.closes_with)()

    def _write(self, values: dict, step: int | None, **kwargs: Any) -> None:
        raise NotImplementedError

    def _log_images_as(
        self, image_type: Callable[[Any], Any], values: dict, step: int | None, **kwargs: Any
    ) -> None:
        """Lists of images under each key, each wrapped in the library's image type."""
        for key, images in values.items():
            self.log({key: [image_type(image) for image in images]}, step=step, **kwargs)


class ResumableTracker(BuiltinTracker):
    """A built-in tracker that can continue a saved run: it implements `_open` (the run object
    from the init kwargs), `_saved_run` (the JSON-able run `save_state` keeps) and
    `_resume_kwargs` (a saved run as the library's init kwargs).

    `continue_run` before `start()` records the run, and `start()` opens it. After `start()` (the
    order Accelerate's examples use: `init_trackers`, then `load_state`) the run `start()` opened is
    closed, and dropped by `_close_fresh_run` where the library allows it when nothing was logged to
    it, then the saved run is opened.
    """

    _resume: dict | None = None
    _started = False

    @on_main_process
    def start(self) -> None:
        setattr(self, self.handle, self._open(self._run_kwargs()))
        self._started = True

    def run_state(self) -> dict | None:
        return self._saved_run() if self._started else None

    @on_main_process
    def continue_run(self, state: dict) -> None:
        self._resume = dict(state)
        if self._started:
            self._close_fresh_run(discard=not self._logged)
            self._started = self._logged = False
            self.start()

    def _run_kwargs(self) -> dict:
        """The init kwargs, plus the saved run's keys when resuming (the user's own kwargs win)."""
        kwargs = dict(self.init_kwargs)
        if self._resume:
            for key, value in self._resume_kwargs(self._resume).items():
                kwargs.setdefault(key, value)
        return kwargs

    def _project(self) -> str | None:
        """The project to open: the saved run's when resuming one, else `run_name`."""
        return (self._resume or {}).get("project") or self.run_name

    def _close_fresh_run(self, discard: bool) -> None:
        """End the run `start()` opened before `continue_run`; `discard`: nothing was logged to it,
        drop it where the library allows (by default the library keeps it)."""
        self._end()

    def _resume_kwargs(self, state: dict) -> dict:
        return {}

    def _open(self, kwargs: dict) -> Any:
        raise NotImplementedError

    def _saved_run(self) -> dict | None:
        raise NotImplementedError


class RunObjectTracker(ResumableTracker):
    """A tracker whose library's `init(project=...)` returns a run object that logs with
    `run.log(values, step=...)` and ends with `run.finish()` (W&B, SwanLab, Trackio). The library
    decides what each process sends, so every process opens the run (`main_process_only = False`,
    as Accelerate), and it keeps its own files (no logging directory)."""

    requires_logging_directory = False
    main_process_only = False
    run: Any  # the library's run object, set by start()

    def _write(self, values: dict, step: int | None, **kwargs: Any) -> None:
        self.run.log(values, step=step, **kwargs)


class ConfigCarryingTracker(RunObjectTracker):
    """A tracker whose library resumes a run by its id (`id=`, `resume="allow"`) and keeps the config
    on the run (W&B, SwanLab): the config `init_trackers` gave a fresh run moves to the saved one."""

    def __init__(self, run_name: str, **kwargs: Any) -> None:
        super().__init__(run_name, **kwargs)
        self._config: dict = {}

    def _resume_kwargs(self, state: dict) -> dict:
        return {"id": state["id"], "resume": "allow"}

    def _carry_config(self, update: Callable[..., Any]) -> None:
        """After opening: when a fresh run was switched for the saved one, its config moves along."""
        if self._resume and self._config:
            update(self._config, allow_val_change=True)


class Table(NamedTuple):
    """What `log_table` was given: `columns` + `data` rows, or a pandas `dataframe`."""

    columns: list[str] | None
    data: list[list[Any]] | None
    dataframe: Any


class TableLogger:
    """Accelerate's `log_table` signature, for the trackers that have one (W&B, ClearML)."""

    @on_main_process
    def log_table(
        self,
        table_name: str,
        columns: list[str] | None = None,
        data: list[list[Any]] | None = None,
        dataframe: Any = None,
        step: int | None = None,
        **kwargs: Any,
    ) -> None:
        """A table from `columns` + `data` rows, or from a pandas `dataframe`, at `step`."""
        self._write_table(table_name, Table(columns, data, dataframe), step, **kwargs)

    def _write_table(self, table_name: str, table: Table, step: int | None, **kwargs: Any) -> None:
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
