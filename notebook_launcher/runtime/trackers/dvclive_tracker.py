"""DVCLive: a `dvclive.Live(**init_kwargs)` (run_name is ignored, as in Accelerate).

A resumed run reopens the saved directory with `resume=True`, so DVCLive continues its step count.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from .base import ResumableTracker, on_main_process


class DVCLiveTracker(ResumableTracker):
    """Accelerate's DVCLiveTracker: kwargs go to `dvclive.Live`; `live=` reuses an existing one."""

    name = "dvclive"
    requires_logging_directory = False

    def __init__(self, run_name: str | None = None, live: Any = None, **kwargs: Any) -> None:
        super().__init__()
        self.live = live
        self.init_kwargs = kwargs
        self._warned: set[str] = set()

    @on_main_process
    def start(self) -> None:
        from dvclive import Live

        kwargs = dict(self.init_kwargs)
        if self._resume:
            kwargs.setdefault("dir", self._resume["dir"])
            kwargs.setdefault("resume", True)
        if self.live is None or self._resume:
            self.live = Live(**kwargs)
        self._started = True

    @property
    def tracker(self) -> Any:
        return self.live

    @on_main_process
    def store_init_configuration(self, values: dict) -> None:
        self.live.log_params(values)

    @on_main_process
    def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        """Values DVCLive can plot as metrics, then one step forward; others are dropped, said once."""
        from dvclive.plots import Metric

        if step is not None:
            self.live.step = step
        for key, value in values.items():
            if Metric.could_log(value):
                self.live.log_metric(key, value, **kwargs)
            elif key not in self._warned:
                self._warned.add(key)
                print(
                    f"notebook_launcher: DVCLive did not record {key!r}: it is not a number.", file=sys.stderr
                )
        self.live.next_step()
        self._logged = True

    @on_main_process
    def finish(self) -> None:
        self.live.end()

    def run_state(self) -> dict | None:
        return {"dir": os.path.abspath(self.live.dir)} if self._started else None

    def _close_fresh_run(self, discard: bool) -> None:
        self.live.end()
