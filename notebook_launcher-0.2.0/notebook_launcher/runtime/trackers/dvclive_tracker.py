"""DVCLive: a `dvclive.Live(**init_kwargs)` (run_name is ignored, as in Accelerate).

A new `Live` empties its folder, so this tracker opens it on first use (first `log`, `tracker` or
`finish`), not in `start()`: a `load_state` right after `init_trackers` can still ask for the saved
folder with `resume=True`, and DVCLive then continues its files and step count. The hyperparameters
`init_trackers` was given wait until then.
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
    packages = (("dvclive", ("dvclive",)),)
    closes_with = "end"

    def __init__(self, run_name: str | None = None, live: Any = None, **kwargs: Any) -> None:
        super().__init__(run_name, **kwargs)
        self.live = live
        self._given = live is not None  # the user's own Live is used as it is, never reopened
        self._params: dict = {}
        self._warned: set[str] = set()

    @on_main_process
    def start(self) -> None:
        self._started = True  # the Live itself opens on first use (see the module docstring)

    def _resume_kwargs(self, state: dict) -> dict:
        return {"dir": state["dir"], "resume": True}

    def _live(self) -> Any:
        if self.live is None:
            from dvclive import Live

            self.live = Live(**self._run_kwargs())
        if self._params:
            self.live.log_params(self._params)
            self._params = {}
        return self.live

    @property
    def tracker(self) -> Any:
        return self._live()

    @on_main_process
    def store_init_configuration(self, values: dict) -> None:
        self._params.update(values)
        if self.live is not None:
            self._live()

    def _write(self, values: dict, step: int | None, **kwargs: Any) -> None:
        """Values DVCLive can plot as metrics, then one step forward; others are dropped, said once."""
        from dvclive.plots import Metric

        live = self._live()
        if step is not None:
            live.step = step
        for key, value in values.items():
            if Metric.could_log(value):
                live.log_metric(key, value, **kwargs)
            elif key not in self._warned:
                self._warned.add(key)
                print(
                    f"notebook_launcher: DVCLive did not record {key!r}: it is not a number.", file=sys.stderr
                )
        live.next_step()

    def _saved_run(self) -> dict | None:
        folder = self.live.dir if self.live is not None else self.init_kwargs.get("dir", "dvclive")
        return {"dir": os.path.abspath(folder)}

    @on_main_process
    def continue_run(self, state: dict) -> None:
        self._resume = dict(state)
        if self.live is not None and not self._given:  # already opened a new run: open the saved one
            self.live.end()
            self.live = None
            self._logged = False
