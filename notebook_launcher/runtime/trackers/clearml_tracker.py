"""ClearML: a `Task` (or the task already running in this process); CLEARML_OFFLINE_MODE=1 keeps it
local. Continuing a saved task is left to ClearML's own `continue_last_task` init kwarg.
"""

from __future__ import annotations

import os
from typing import Any

from ...errors import ConfigError
from .base import BuiltinTracker, Table, TableLogger, on_main_process


class ClearMLTracker(TableLogger, BuiltinTracker):
    """Accelerate's ClearMLTracker: CLEARML_PROJECT / CLEARML_TASK win over `run_name`."""

    name = "clearml"
    requires_logging_directory = False
    packages = (("clearml", ("clearml",)),)
    handle = "task"

    def __init__(self, run_name: str | None = None, **kwargs: Any) -> None:
        super().__init__(run_name, **kwargs)
        self.user_provided_run_name = run_name
        self._initialized_externally = False

    @on_main_process
    def start(self) -> None:
        from clearml import Task

        current: Task | None = Task.current_task()
        if current:
            self._initialized_externally = True
            self.task = current
            return
        kwargs = dict(self.init_kwargs)
        kwargs.setdefault("project_name", os.environ.get("CLEARML_PROJECT", self.user_provided_run_name))
        kwargs.setdefault("task_name", os.environ.get("CLEARML_TASK", self.user_provided_run_name))
        self.task = Task.init(**kwargs)

    @on_main_process
    def store_init_configuration(self, values: dict) -> Any:
        return self.task.connect_configuration(values)

    def _write(self, values: dict, step: int | None, **kwargs: Any) -> None:
        """Numbers only: scalars at `step` (series from an eval_/test_/train_ prefix), single values without."""
        clearml_logger = self.task.get_logger()
        for key, value in values.items():
            if not isinstance(value, (int, float)):
                continue
            if step is None:
                clearml_logger.report_single_value(name=key, value=value, **kwargs)
                continue
            title, series = _title_series(key)
            clearml_logger.report_scalar(title=title, series=series, value=value, iteration=step, **kwargs)

    @on_main_process
    def log_images(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        clearml_logger = self.task.get_logger()
        for key, image in values.items():
            title, series = _title_series(key)
            clearml_logger.report_image(title=title, series=series, iteration=step, image=image, **kwargs)

    def _write_table(self, table_name: str, table: Table, step: int | None, **kwargs: Any) -> None:
        plot = table.dataframe
        if plot is None:
            if table.data is None:
                raise ConfigError(
                    "ClearMLTracker.log_table needs `data` (rows) when no `dataframe` is given."
                )
            plot = [table.columns, *table.data] if table.columns else table.data
        title, series = _title_series(table_name)
        self.task.get_logger().report_table(
            title=title, series=series, table_plot=plot, iteration=step, **kwargs
        )

    def _end(self) -> None:
        """Close the task unless it was started outside the Accelerator."""
        if self.task and not self._initialized_externally:
            self.task.close()


def _title_series(name: str) -> tuple[str, str]:
    for prefix in ("eval", "test", "train"):
        if name.startswith(prefix + "_"):
            return name[len(prefix) + 1 :], prefix
    return name, "train"
