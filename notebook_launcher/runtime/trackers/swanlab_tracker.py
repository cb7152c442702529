"""SwanLab: `swanlab.init(project=run_name, **init_kwargs)`; mode="local"/"offline" needs no account.

A resumed run passes the saved `id=` with `resume="allow"`; an offline run opened by `init_trackers`
before `load_state` that logged nothing is removed (its folder), as for W&B.
"""

from __future__ import annotations

import shutil
from typing import Any

from .base import ConfigCarryingTracker, on_main_process


class SwanLabTracker(ConfigCarryingTracker):
    """Accelerate's SwanLabTracker: `run_name` is the SwanLab project; kwargs go to `swanlab.init`."""

    name = "swanlab"
    packages = (("swanlab", ("swanlab",)),)

    def _open(self, kwargs: dict) -> Any:
        import swanlab

        run = swanlab.init(project=self.run_name, **kwargs)
        swanlab.config["FRAMEWORK"] = "🤗Accelerate"  # as Accelerate does: SwanLab shows its logo
        self._carry_config(swanlab.config.update)
        return run

    @on_main_process
    def store_init_configuration(self, values: dict) -> None:
        import swanlab

        swanlab.config.update(values, allow_val_change=True)
        self._config.update(values)

    @on_main_process
    def log_images(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        import swanlab

        self._log_images_as(swanlab.Image, values, step, **kwargs)

    def _saved_run(self) -> dict | None:
        run_id = getattr(self.run, "id", None)
        return {"id": run_id} if run_id else None

    def _close_fresh_run(self, discard: bool) -> None:
        run = self.run
        run.finish()
        if discard and getattr(run, "mode", None) == "offline":
            shutil.rmtree(run.dir, ignore_errors=True)  # never synced: nothing else knows it
