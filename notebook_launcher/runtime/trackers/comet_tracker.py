"""Comet: `comet_ml.start(project_name=run_name, **init_kwargs)`; `online=False` (or COMET_MODE /
COMET_OFFLINE_DIRECTORY settings) writes an offline archive that `comet upload` sends later.

A resumed run passes the saved `experiment_key` with `mode="get_or_create"`, so Comet continues
the same experiment (offline: a second archive under the same key). The fresh run a resume replaces
is kept (offline: an archive nobody uploads unless asked).
"""

from __future__ import annotations

from typing import Any

from .base import ResumableTracker, on_main_process


class CometMLTracker(ResumableTracker):
    """Accelerate's CometMLTracker: `run_name` is the Comet project; kwargs go to `comet_ml.start`."""

    name = "comet_ml"
    requires_logging_directory = False
    packages = (("comet_ml", ("comet_ml", "comet-ml")),)
    handle = "writer"
    closes_with = "end"
    writer: Any  # the Comet experiment, set by start()

    def _resume_kwargs(self, state: dict) -> dict:
        return {"experiment_key": state["experiment_key"], "mode": "get_or_create"}

    def _open(self, kwargs: dict) -> Any:
        import comet_ml

        if hasattr(comet_ml, "start"):  # comet_ml >= 3.41
            return comet_ml.start(project_name=self.run_name, **kwargs)
        return comet_ml.Experiment(project_name=self.run_name, **kwargs)

    @on_main_process
    def store_init_configuration(self, values: dict) -> None:
        self.writer.log_parameters(values)

    def _write(self, values: dict, step: int | None, **kwargs: Any) -> None:
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

    def _saved_run(self) -> dict | None:
        return {"experiment_key": self.writer.get_key()}
