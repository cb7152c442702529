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
    packages = (("aim", ("aim",)),)
    handle = "writer"
    closes_with = "close"
    writer: Any  # the aim.Run, set by start()

    def __init__(
        self, run_name: str, logging_dir: str | os.PathLike[str] | None = ".", **kwargs: Any
    ) -> None:
        super().__init__(run_name, **kwargs)
        self.aim_repo_path = logging_dir

    @classmethod
    def supports_version(cls, version: str) -> bool:
        return int(version.split(".")[0]) < 4  # Accelerate supports aim 3.x

    def _resume_kwargs(self, state: dict) -> dict:
        return {"run_hash": state["run_hash"]}

    def _open(self, kwargs: dict) -> Any:
        from aim import Run

        run = Run(repo=self.aim_repo_path, **kwargs)
        run.name = self.run_name
        return run

    @on_main_process
    def store_init_configuration(self, values: dict) -> None:
        self.writer["hparams"] = values

    def _write(self, values: dict, step: int | None, **kwargs: Any) -> None:
        for key, value in values.items():
            self.writer.track(value, name=key, step=step, **kwargs)

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

    def _saved_run(self) -> dict | None:
        return {"run_hash": self.writer.hash}

    def _close_fresh_run(self, discard: bool) -> None:
        fresh = self.writer.hash
        self.writer.close()
        self.writer = None
        if discard:
            from aim import Repo

            gc.collect()  # the run's storage is released when the Run object goes, not at close()
            Repo.from_path(str(self.aim_repo_path)).delete_run(fresh)
