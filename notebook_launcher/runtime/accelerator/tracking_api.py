"""The Accelerator's experiment-tracking methods (Accelerate's names and gating), kept apart so
facade.py stays about preparing and training.

As in Accelerate, `init_trackers` and the trackers' part of `log` run on the main process only, so
a run's tracker files are written once. `log` also sends the metrics to the notebook (RunView,
`result.metrics`) from every rank, with or without trackers. Beyond Accelerate, `save_state` saves
which tracker runs were open and `load_state` makes the trackers continue those runs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import ConfigError, install_hint
from .. import telemetry
from ..checkpointing import checkpoint
from ..trackers import LOGGER_TYPE_TO_CLASS, GeneralTracker
from ..trackers.base import plain_values
from ..trackers.registry import package_for, resolve_log_with


class TrackingAPI:
    """Mixin: needs `is_main_process` (ProcessAPI), `project_dir` or `project_configuration`, and an
    `end_training` further along the MRO (SavingAPI). The constructor calls `_init_tracking`."""

    trackers: list[GeneralTracker]
    log_with: list[Any]

    if TYPE_CHECKING:  # ProcessAPI's, in the Accelerator

        @property
        def is_main_process(self) -> bool: ...

    def _init_tracking(self, log_with: Any) -> None:
        """Decide the trackers now (bad names fail at construction, as in Accelerate); start none."""
        self.trackers = []
        self._saved_tracker_runs: dict[str, dict] = {}
        chosen, missing = resolve_log_with(log_with, self._tracker_logging_dir())
        if self.is_main_process:
            for name in missing:
                print(
                    f"notebook_launcher: log_with {name!r} skipped: the {package_for(name)!r} package is not "
                    f"installed: {install_hint(package_for(name), name)}.",
                    file=sys.stderr,
                )
            if log_with is not None and not chosen and not missing:
                print(
                    f"notebook_launcher: log_with={log_with!r}: no supported tracker is installed; metrics "
                    "still reach the notebook.",
                    file=sys.stderr,
                )
        self.log_with = chosen

    def _tracker_logging_dir(self) -> str | os.PathLike[str] | None:
        """ProjectConfiguration.logging_dir when there is one, else project_dir (Accelerate's default)."""
        project = getattr(self, "project_configuration", None)
        if project is not None and getattr(project, "logging_dir", None) is not None:
            return project.logging_dir
        return getattr(self, "project_dir", None)

    def init_trackers(
        self, project_name: str, config: dict | None = None, init_kwargs: dict | None = None
    ) -> None:
        """Start a run in every tracker of `log_with` (main process only), with `config` as its
        hyperparameters; `init_kwargs={"wandb": {...}}` go to that tracker's constructor."""
        if not self.is_main_process:
            return
        init_kwargs = init_kwargs or {}
        logging_dir = self._tracker_logging_dir()
        new: list[GeneralTracker] = []
        for entry in self.log_with:
            if isinstance(entry, GeneralTracker):
                new.append(entry)  # a custom tracker arrives built
                continue
            cls = LOGGER_TYPE_TO_CLASS[str(entry)]
            build: Callable[..., GeneralTracker] = cls  # each tracker class has its own constructor
            kwargs = init_kwargs.get(str(entry), {})
            if cls.requires_logging_directory:
                new.append(build(project_name, logging_dir, **kwargs))
            else:
                new.append(build(project_name, **kwargs))
        self.trackers.extend(new)
        for tracker in new:
            name: Any = getattr(tracker, "name", None)
            saved = self._saved_tracker_runs.get(name)
            if saved:  # load_state came first: open the saved run instead of a new one
                tracker.continue_run(saved)
            tracker.start()
        if config is not None:
            for tracker in new:
                tracker.store_init_configuration(config)

    def get_tracker(self, name: str, unwrap: bool = False) -> Any:
        """The tracker called `name` (its library object with unwrap=True); on other processes, or
        without trackers, a blank GeneralTracker whose methods do nothing (as in Accelerate)."""
        if not self.trackers:
            return GeneralTracker(_blank=True)
        for tracker in self.trackers:
            if tracker.name == name:
                return tracker.tracker if unwrap else tracker
        names = [t.name for t in self.trackers]
        raise ConfigError(f"get_tracker({name!r}): no such tracker in this Accelerator; it has {names}.")

    def log(self, values: dict, step: int | None = None, log_kwargs: dict | None = None) -> None:
        """Send `values` to the notebook (every rank, no collective) and to the trackers (main process);
        `log_kwargs={"wandb": {...}}` go to that tracker's log()."""
        values = plain_values(values)
        telemetry.emit("metric", step=step, values=values)
        if not self.is_main_process:
            return
        log_kwargs = log_kwargs or {}
        for tracker in self.trackers:
            tracker.log(values, step=step, **log_kwargs.get(tracker.name, {}))

    def end_training(self) -> None:
        """Finish every tracker (main process), then what end_training does without trackers."""
        for tracker in self.trackers:
            tracker.finish()
        super().end_training()  # type: ignore[misc]

    # ---- the checkpoint carries the tracker runs (beyond Accelerate)
    def _tracker_runs(self) -> dict[str, dict]:
        runs = {}
        for tracker in self.trackers:
            state = tracker.run_state()
            if state:
                runs[tracker.name] = state
        return runs

    def _continue_tracker_runs(self, checkpoint_dir: str | os.PathLike[str]) -> None:
        """After load_state: started trackers switch to the saved runs; later ones start in them."""
        self._saved_tracker_runs = checkpoint.read_tracker_runs(Path(checkpoint_dir))
        for tracker in self.trackers:
            saved = self._saved_tracker_runs.get(tracker.name)
            if saved:
                tracker.continue_run(saved)
