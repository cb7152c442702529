"""Trackio (Hugging Face's local-first tracker): `trackio.init(project=run_name, **init_kwargs)`; the
data lives in a local SQLite file (TRACKIO_DIR) unless a Space or server is named.

A resumed run reopens the saved run name in the saved project (`resume="allow"`).
"""

from __future__ import annotations

from typing import Any, cast

from .base import RunObjectTracker, on_main_process


class TrackioTracker(RunObjectTracker):
    """Accelerate's TrackioTracker: `run_name` is the Trackio project; kwargs go to `trackio.init`."""

    name = "trackio"
    packages = (("trackio", ("trackio",)),)

    def _resume_kwargs(self, state: dict) -> dict:
        return {"name": state["name"], "resume": "allow"}

    def _open(self, kwargs: dict) -> Any:
        import trackio

        # init_trackers always passes its project_name (a str) as run_name
        return trackio.init(project=cast(str, self._project()), **kwargs)

    @on_main_process
    def store_init_configuration(self, values: dict) -> None:
        import trackio

        trackio.config.update(values, allow_val_change=True)

    def _saved_run(self) -> dict | None:
        return {"project": self.run.project, "name": self.run.name}

    def _close_fresh_run(self, discard: bool) -> None:
        self.run.finish()
        if discard:
            from trackio import SQLiteStorage

            SQLiteStorage.delete_run(self.run.project, self.run.name, run_id=getattr(self.run, "id", None))
