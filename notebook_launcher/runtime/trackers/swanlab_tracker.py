"""SwanLab: `swanlab.init(project=run_name, **init_kwargs)`; mode="local"/"offline" needs no account.

A resumed run passes the saved `id=` with `resume="allow"`; an offline run opened by `init_trackers`
before `load_state` that logged nothing is removed (its folder), as for W&B.
"""

from __future__ import annotations

import shutil
from typing import Any

from .base import ResumableTracker, on_main_process


class SwanLabTracker(ResumableTracker):
    """Accelerate's SwanLabTracker: `run_name` is the SwanLab project; kwargs go to `swanlab.init`."""

    name = "swanlab"
    requires_logging_directory = False
    main_process_only = False

    def __init__(self, run_name: str, **kwargs: Any) -> None:
        super().__init__()
        self.run_name = run_name
        self.init_kwargs = kwargs
        self._config: dict = {}

    @on_main_process
    def start(self) -> None:
        import swanlab

        kwargs = dict(self.init_kwargs)
        if self._resume:
            kwargs.setdefault("id", self._resume["id"])
            kwargs.setdefault("resume", "allow")
        self.run = swanlab.init(project=self.run_name, **kwargs)
        swanlab.config["FRAMEWORK"] = "🤗Accelerate"  # as Accelerate does: SwanLab shows its logo
        if self._resume and self._config:  # switched from a fresh run: the config moves along
            swanlab.config.update(self._config, allow_val_change=True)
        self._started = True

    @property
    def tracker(self) -> Any:
        return self.run

    @on_main_process
    def store_init_configuration(self, values: dict) -> None:
        import swanlab

        swanlab.config.update(values, allow_val_change=True)
        self._config.update(values)

    @on_main_process
    def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        self.run.log(values, step=step, **kwargs)
        self._logged = True

    @on_main_process
    def log_images(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        import swanlab

        for key, images in values.items():
            self.log({key: [swanlab.Image(image) for image in images]}, step=step, **kwargs)

    @on_main_process
    def finish(self) -> None:
        self.run.finish()

    def run_state(self) -> dict | None:
        run_id = getattr(self.run, "id", None) if self._started else None
        return {"id": run_id} if run_id else None

    def _close_fresh_run(self, discard: bool) -> None:
        run = self.run
        run.finish()
        if discard and getattr(run, "mode", None) == "offline":
            shutil.rmtree(run.dir, ignore_errors=True)  # never synced: nothing else knows it
