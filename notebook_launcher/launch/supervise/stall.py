"""Stall detection for a running launch: notice when no rank makes progress, and answer requests
for a hang report.

Progress is anything a rank sends: an output line (except the stack dumps we asked for), a step of
a prepared data loader, a logged metric. After `stall_timeout` seconds without any, the supervisor
asks for a report once; the next one comes only after progress resumed and stalled again. Each rank
keeps its collective record (records/activity.py) in a file of the run's private directory
(system/private_files.py), made here, given to the ranks (RUN_DIR_ENV: what they write for the run
goes there too) and removed when the launch ends.
"""

from __future__ import annotations

import os
import re
import shutil
import threading
import time
from collections.abc import Sequence
from typing import Any

from ...records.activity import ENV, read_record
from ...records.names import RUN_DIR_ENV
from ...system.private_files import make_private_dir
from ..events import MetricLogged, OutputLine, ProgressUpdate
from .hang_report import HangReport, make_report, ranks_from
from .processes import Worker

_DUMP_LINE = re.compile(
    r'^(\s*File ".*", line \d+ in .*|(Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):'
    r"|\s*<no Python frame>|\s*)$"
)


def is_dump_line(text: str) -> bool:
    """A line of a faulthandler stack dump (what a report request makes each rank print)."""
    return bool(_DUMP_LINE.match(text))


class HangWatch:
    """The launch's progress clock, its report requests, and the ranks' collective records.

    Called as an observer with every launch event (in the supervisor's thread); `ask()` may be
    called from any thread (RunHandle.stacks(), a RunView button).
    """

    def __init__(self, stall_timeout: float | None) -> None:
        self.stall_timeout = stall_timeout or None
        self.last_progress = time.monotonic()
        self.dumping = False  # while our own stack-dump request is being answered
        self._reported = False  # for the current stall
        self._asked = threading.Event()
        self._answered = threading.Condition()
        self._answers = 0
        self._closed = False
        self.latest: HangReport | None = None
        self._dir = make_private_dir()  # 0700; removed by close()

    # ------------------------------------------------------------- the workers
    def give_records(self, specs: Sequence[Any]) -> None:
        """Tell each worker (through its env) the run's private directory and where in it to keep its
        collective record."""
        for spec in specs:
            spec.env[ENV] = self._path(spec.rank)
            spec.env[RUN_DIR_ENV] = self._dir

    def _path(self, rank: int) -> str:
        return os.path.join(self._dir, f"rank{rank}")

    # --------------------------------------------------------------- progress
    def __call__(self, event: Any) -> None:
        if isinstance(event, OutputLine) and (self.dumping or is_dump_line(event.text)):
            return
        if isinstance(event, (OutputLine, ProgressUpdate, MetricLogged)):
            self.last_progress = time.monotonic()
            self._reported = False

    def stalled(self, workers: Sequence[Worker]) -> bool:
        """True once per stall: stall_timeout seconds without progress, not yet reported. The clock
        starts when every worker runs our code (a spawned one imports for seconds first, and
        before that it has no stack to show)."""
        if self.stall_timeout is None or self._reported:
            return False
        if not all(w.started or w.exited for w in workers):
            self.last_progress = time.monotonic()
            return False
        return time.monotonic() - self.last_progress > self.stall_timeout

    # ---------------------------------------------------------------- reports
    def ask(self) -> None:
        """Ask for a report now; the supervisor answers with a HangReported event."""
        self._asked.set()

    def asked(self) -> bool:
        return self._asked.is_set()

    def ask_and_wait(self, timeout: float) -> HangReport:
        with self._answered:
            seen = self._answers
            self.ask()
            self._answered.wait_for(lambda: self._answers > seen or self._closed, timeout)
            if self._answers > seen and self.latest is not None:
                return self.latest
        if self._closed:
            raise RuntimeError("The launch ended before the stack report was made; nothing is running.")
        raise TimeoutError(f"No stack report within {timeout:g} s (the launch did not answer).")

    def activities(self, workers: Sequence[Worker]) -> dict[int, Any]:
        """Each rank's collective record as it stands (None before it wrote one)."""
        return {w.rank: read_record(self._path(w.rank)) for w in workers}

    def report(self, reason: str, workers: Sequence[Worker], stacks: dict[int, str]) -> HangReport:
        """The report on `workers` as they stand, with the stacks just dumped."""
        activities = self.activities(workers)
        exited = {w.rank for w in workers if w.exited}
        states = ranks_from([w.rank for w in workers], activities, stacks, exited)
        made = make_report(reason, states, time.monotonic() - self.last_progress)
        if reason == "stall":
            self._reported = True
        with self._answered:
            self.latest = made
            if reason == "asked":
                self._asked.clear()
                self._answers += 1
            self._answered.notify_all()
        return made

    def close(self) -> None:
        with self._answered:
            self._closed = True
            self._answered.notify_all()
        shutil.rmtree(self._dir, ignore_errors=True)
