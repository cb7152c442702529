"""Aim: an `aim.Run` in the repository at logging_dir ("." by default), named after the project.

A resumed run reopens the saved run hash (`Run(run_hash=...)`), so its sequences continue.
"""

from __future__ import annotations

import gc
import os
from typing import Any

from .base import ResumableTracker, on_main_process


class AimTracker(ResumableTracker):
    """Accelerate's AimTracker: `run_name`, the repository `logging_dir`, kwargs for `aim.Run`."""

    name = "aim"
    requires_logging_directory = True

    def __init__(
        self, run_name: str, logging_dir: str | os.PathLike[str] | None = ".", **kwargs: Any
    ) -> None:
        super().__init__()
        self.run_name = run_name
        self.aim_repo_path = logging_dir
        self.init_kwargs = kwargs

    @on_main_process
    def start(self) -> None:
        from aim import Run

        kwargs = dict(self.init_kwargs)
        if self._resume:
            kwargs.setdefault("run_hash", self._resume["run_hash"])
        self.writer = Run(repo=self.aim_repo_path, **kwargs)
        self.writer.name = self.run_name
        self._started = True

    @property
    def tracker(self) -> Any:
        return self.writer

    @on_main_process
    def store_init_configuration(self, values: dict) -> None:
        self.writer["hparams"] = values

    @on_main_process
    def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        for key, value in values.items():
            self.writer.track(value, name=key, step=step, **kwargs)
        self._logged = True

    @on_main_process
    def log_images(
        self, values: dict, step: int | None = None, kwargs: dict[str, dict] | None = None
    ) -> None:
        """Images (or (image, caption) pairs); kwargs={"aim_image": {...}, "track": {...}}."""
        import aim

        image_kwargs = (kwargs or {}).get("aim_image", {})
        track_kwargs = (kwargs or {}).get("track", {})
        for key, value in values.items():
            image, caption = value if isinstance(value, tuple) else (value, "")
            self.writer.track(
                aim.Image(image, caption=caption, **image_kwargs), name=key, step=step, **track_kwargs
            )

    @on_main_process
    def finish(self) -> None:
        self.writer.close()

    def run_state(self) -> dict | None:
        return {"run_hash": self.writer.hash} if self._started else None

    def _close_fresh_run(self, discard: bool) -> None:
        fresh = self.writer.hash
        self.writer.close()
        self.writer = None
        if discard:
            from aim import Repo

            gc.collect()  # the run's storage is released when the Run object goes, not at close()
            Repo.from_path(str(self.aim_repo_path)).delete_run(fresh)
