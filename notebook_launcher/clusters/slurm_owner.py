"""A SLURM job ends with the notebook that started it.

Ray ends a driver's actors when the driver dies; SLURM keeps a batch job running after the process
that submitted it is gone, which is right for a script and wrong for a notebook: a kernel killed by
the OOM killer (or restarted) would leave its job holding the allocation and its GPUs, with nobody
to read the results. So the notebook's side beats (a counter in a file of the job's folder, which
both sides already share), and each node's task watches it: no beat for OWNER_TIMEOUT seconds ->
the task stops its ranks and the job ends. The comparison uses only the task's own clock, so
clocks that differ between the login node and the compute nodes do not matter.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ..records.names import SLURM_OWNER_TIMEOUT_ENV
from ..system.private_files import write_private

OWNER_TIMEOUT_ENV = SLURM_OWNER_TIMEOUT_ENV
DEFAULT_OWNER_TIMEOUT = 30.0  # seconds without a beat; 0 turns the watch off
BEAT_SECONDS = 1.0
WATCH_SECONDS = 1.0


def owner_path(folder: str | os.PathLike[str], job_id: str) -> Path:
    return Path(folder) / f"{job_id}_notebook_alive"


def owner_timeout() -> float:
    value = os.environ.get(OWNER_TIMEOUT_ENV, "")
    try:
        return float(value) if value else DEFAULT_OWNER_TIMEOUT
    except ValueError:
        return DEFAULT_OWNER_TIMEOUT


class OwnerBeat:
    """The notebook's side: called from the driver's poll loop, writes at most once a second."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.count = 0
        self.last = 0.0

    def beat(self) -> None:
        now = time.monotonic()
        if now - self.last < BEAT_SECONDS:
            return
        self.last, self.count = now, self.count + 1
        try:  # replaced whole: never half a number for the reader
            write_private(str(self.path.parent), self.path.name, str(self.count))
        except OSError:
            pass  # a full disk or a vanished folder: the job's own files say more than we could


class OwnerWatch:
    """A node task's side: a daemon thread that calls `gone(reason)` once when the beats stop."""

    def __init__(self, path: Path, gone: Callable[[str], None], timeout: float | None = None) -> None:
        self.path = path
        self.gone = gone
        self.timeout = owner_timeout() if timeout is None else timeout
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="notebook-owner-watch", daemon=True)

    def __enter__(self) -> OwnerWatch:
        if self.timeout > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()

    def _read(self) -> str | None:
        try:
            return self.path.read_text()
        except OSError:
            return None

    def _watch(self) -> None:
        seen, since = self._read(), time.monotonic()
        while not self._done.wait(WATCH_SECONDS):
            now = self._read()
            if now != seen:
                seen, since = now, time.monotonic()
            elif time.monotonic() - since > self.timeout:
                self.gone(
                    f"the notebook that started this job stopped watching it (no sign of it for "
                    f"{self.timeout:.0f} s: its kernel died or was restarted); stopping the ranks "
                    f"({OWNER_TIMEOUT_ENV}=0 keeps a job running without its notebook)"
                )
                return
