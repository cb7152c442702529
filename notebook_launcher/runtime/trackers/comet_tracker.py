"""Comet: `comet_ml.start(project_name=run_name, **init_kwargs)`; `online=False` (or COMET_MODE /
COMET_OFFLINE_DIRECTORY settings) writes an offline archive that `comet upload` sends later.

A resumed run passes the saved `experiment_key` with `mode="get_or_create"`, so Comet continues
the same experiment (offline: a second archive under the same key).
"""

from __future__ import annotations

from typing import Any

from .base import ResumableTracker, on_main_process


class CometMLTracker(ResumableTracker):
    """Accelerate's CometMLTracker: `run_name` is the Comet project; kwargs go to `comet_ml.start`."""

    name = "comet_ml"
    requires_logging_directory = False

    def __init__(self, run_name: str, **kwargs: Any) -> None:
        super().__init__()
        self.run_name = run_name
        self.init_kwargs = kwargs

    @on_main_process
    def start(self) -> None:
        import comet_ml

        kwargs = dict(self.init_kwargs)
        if self._resume:
            kwargs.setdefault("experiment_key", self._resume["experiment_key"])
            kwargs.setdefault("mode", "get_or_create")
        if hasattr(comet_ml, "start"):  # comet_ml >= 3.41
            self.writer = comet_ml.start(project_name=self.run_name, **kwargs)
        else:
            self.writer = comet_ml.Experiment(project_name=self.run_name, **kwargs)
        self._started = True

    @property
    def tracker(self) -> Any:
        return self.writer

    @on_main_process
    def store_init_configuration(self, values: dict) -> None:
        self.writer.log_parameters(values)

    @on_main_process
    def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        """Numbers as metrics, strings as "others", dicts of numbers as several metrics."""
        if step is not None:
            self.writer.set_step(step)
        for key, value in values.items():
            if isinstance(value, (int, float)):
                self.writer.log_metric(key, value, step=step, **kwargs)
            elif isinstance(value, str):
                self.writer.log_other(key, value, **kwargs)
            elif isinstance(value, dict):
                self.writer.log_metrics(value, step=step, **kwargs)
        self._logged = True

    @on_main_process
    def finish(self) -> None:
        self.writer.end()

    def run_state(self) -> dict | None:
        return {"experiment_key": self.writer.get_key()} if self._started else None

    def _close_fresh_run(self, discard: bool) -> None:
        self.writer.end()  # Comet keeps it (offline: an archive nobody uploads unless asked)
