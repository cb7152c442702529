"""Weights & Biases: `wandb.init(project=run_name, **init_kwargs)`; WANDB_MODE=offline works unchanged.

A resumed run passes the saved `id=` with `resume="allow"`, so W&B appends to the same run (offline
runs get a second local folder with the same id; `wandb sync` uploads both into that one run).
"""

from __future__ import annotations

import shutil
import sys
from typing import Any

from .base import ResumableTracker, on_main_process


class WandBTracker(ResumableTracker):
    """Accelerate's WandBTracker: `run_name` is the W&B project; kwargs go to `wandb.init`."""

    name = "wandb"
    requires_logging_directory = False
    main_process_only = False

    def __init__(self, run_name: str, **kwargs: Any) -> None:
        super().__init__()
        self.run_name = run_name
        self.init_kwargs = kwargs
        self._config: dict = {}

    @on_main_process
    def start(self) -> None:
        import wandb

        kwargs = dict(self.init_kwargs)
        project = self.run_name
        if self._resume:
            kwargs.setdefault("id", self._resume["id"])
            kwargs.setdefault("resume", "allow")
            project = self._resume.get("project") or project
        self.run = wandb.init(project=project, **kwargs)
        if self._resume and self._config:  # switched from a fresh run: the config moves along
            self.run.config.update(self._config, allow_val_change=True)
        self._started = True

    @property
    def tracker(self) -> Any:
        return self.run

    @on_main_process
    def store_init_configuration(self, values: dict) -> None:
        self.run.config.update(values, allow_val_change=True)
        self._config.update(values)

    @on_main_process
    def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        self.run.log(values, step=step, **kwargs)
        self._logged = True

    @on_main_process
    def log_images(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        import wandb

        for key, images in values.items():
            self.log({key: [wandb.Image(image) for image in images]}, step=step, **kwargs)

    @on_main_process
    def log_table(
        self,
        table_name: str,
        columns: list[str] | None = None,
        data: list[list[Any]] | None = None,
        dataframe: Any = None,
        step: int | None = None,
        **kwargs: Any,
    ) -> None:
        import wandb

        table = wandb.Table(columns=columns, data=data, dataframe=dataframe)
        self.log({table_name: table}, step=step, **kwargs)

    @on_main_process
    def finish(self) -> None:
        self.run.finish()

    def run_state(self) -> dict | None:
        if not self._started:
            return None
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
