"""Trackio (Hugging Face's local-first tracker): `trackio.init(project=run_name, **init_kwargs)`; the
data lives in a local SQLite file (TRACKIO_DIR) unless a Space or server is named.

A resumed run reopens the saved run name in the saved project (`resume="allow"`).
"""

from __future__ import annotations

from typing import Any

from .base import ResumableTracker, on_main_process


class TrackioTracker(ResumableTracker):
    """Accelerate's TrackioTracker: `run_name` is the Trackio project; kwargs go to `trackio.init`."""

    name = "trackio"
    requires_logging_directory = False
    main_process_only = False

    def __init__(self, run_name: str, **kwargs: Any) -> None:
        super().__init__()
        self.run_name = run_name
        self.init_kwargs = kwargs

    @on_main_process
    def start(self) -> None:
        import trackio

        kwargs = dict(self.init_kwargs)
        project = self.run_name
        if self._resume:
            kwargs.setdefault("name", self._resume["name"])
            kwargs.setdefault("resume", "allow")
            project = self._resume.get("project") or project
        self.run = trackio.init(project=project, **kwargs)
        self._started = True

    @property
    def tracker(self) -> Any:
        return self.run

    @on_main_process
    def store_init_configuration(self, values: dict) -> None:
        import trackio

        trackio.config.update(values, allow_val_change=True)

    @on_main_process
    def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        self.run.log(values, step=step, **kwargs)
        self._logged = True

    @on_main_process
    def finish(self) -> None:
        self.run.finish()

    def run_state(self) -> dict | None:
        if not self._started:
            return None
        return {"project": self.run.project, "name": self.run.name}

    def _close_fresh_run(self, discard: bool) -> None:
        self.run.finish()
        if discard:
            from trackio import SQLiteStorage

            SQLiteStorage.delete_run(self.run.project, self.run.name, run_id=getattr(self.run, "id", None))
