"""Weights & Biases: `wandb.init(project=run_name, **init_kwargs)`; WANDB_MODE=offline works unchanged.

A resumed run passes the saved `id=` with `resume="allow"`, so W&B appends to the same run (offline
runs get a second local folder with the same id; `wandb sync` uploads both into that one run).
"""

from __future__ import annotations

import shutil
import sys
from typing import Any

from .base import ConfigCarryingTracker, Table, TableLogger, on_main_process


class WandBTracker(TableLogger, ConfigCarryingTracker):
    """Accelerate's WandBTracker: `run_name` is the W&B project; kwargs go to `wandb.init`."""

    name = "wandb"
    packages = (("wandb", ("wandb",)),)

    def _open(self, kwargs: dict) -> Any:
        import wandb

        run = wandb.init(project=self._project(), **kwargs)
        self._carry_config(run.config.update)
        return run

    @on_main_process
    def store_init_configuration(self, values: dict) -> None:
        self.run.config.update(values, allow_val_change=True)
        self._config.update(values)

    @on_main_process
    def log_images(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        import wandb

        self._log_images_as(wandb.Image, values, step, **kwargs)

    def _write_table(self, table_name: str, table: Table, step: int | None, **kwargs: Any) -> None:
        import wandb

        self.log({table_name: wandb.Table(**table._asdict())}, step=step, **kwargs)

    def _saved_run(self) -> dict | None:
        return {"id": self.run.id, "project": self.run.project}

    def _close_fresh_run(self, discard: bool) -> None:
        run = self.run
        run.finish()
        if not discard:
            return
        if getattr(run, "offline", False):
            shutil.rmtree(run.settings.sync_dir, ignore_errors=True)  # never synced: nothing else knows it
        else:
            print(
                f"notebook_launcher: W&B run {run.id!r}, opened by init_trackers before load_state, holds only "
                "its config; logging continues in the saved run. Call load_state before init_trackers to "
                "avoid the extra run.",
                file=sys.stderr,
            )
