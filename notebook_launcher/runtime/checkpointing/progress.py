"""How far this rank's background write of a save is, told to the launcher: the cell, the RunView and
`%ranks status` show the save in flight (launch/cell/checkpoint_view.py).

One "checkpoint_writing" message when save_state returns ("staged", sent by the calling thread, so it
comes before anything the function does next), then the bytes on disk ("writing") at most every
NOTEBOOK_LAUNCHER_CHECKPOINT_PROGRESS_SECONDS (default 1 s; 0: after every file and nothing in
between), then "written" when this rank's files are complete or "failed". The bytes are the sizes of
this rank's files so far, the one being written included: a small thread stats it while the writer
thread is inside torch.save, so one large file shows its progress too. The messages never block
(launch/worker/channel.py drops one when the pipe is full): a report must not slow the write.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from ...records.names import CHECKPOINT_PROGRESS_ENV
from .. import telemetry

DEFAULT_INTERVAL_SECONDS = 1.0


def report_interval() -> float:
    try:
        return max(0.0, float(os.environ.get(CHECKPOINT_PROGRESS_ENV, DEFAULT_INTERVAL_SECONDS)))
    except ValueError:
        return DEFAULT_INTERVAL_SECONDS


class WriteProgress:
    """One save on one rank: staged -> writing (bytes, at a modest rate) -> written | failed."""

    def __init__(
        self, rank: int, step: int, path: str, staged_bytes: int, bytes_on_disk: Callable[[], int]
    ) -> None:
        self.rank, self.step, self.path, self.staged_bytes = rank, step, path, staged_bytes
        self.bytes_on_disk = bytes_on_disk
        self.interval = report_interval()
        self._sent_at = 0.0
        self._sent_bytes = -1
        self._lock = threading.Lock()
        self._done = threading.Event()

    def _send(self, state: str, written: int) -> None:
        with self._lock:
            if state == "writing" and self._done.is_set():
                return  # the ticker's last look came after the end: "written" stays the last word
            self._sent_at, self._sent_bytes = time.monotonic(), written
            telemetry.emit(
                "checkpoint_writing",
                step=self.step,
                path=self.path,
                written_bytes=written,
                staged_bytes=self.staged_bytes,
                state=state,
            )

    def staged(self) -> None:
        """save_state is returning: the save is in flight (the calling thread)."""
        self._send("staged", 0)

    def begin(self) -> None:
        """The writer thread starts; with an interval, a ticker reports the file being written."""
        if self.interval > 0 and telemetry.has_sink():
            threading.Thread(target=self._tick, name="checkpoint-progress", daemon=True).start()

    def file_written(self) -> None:
        """After each file: reported when the interval has passed (every file with interval 0)."""
        if time.monotonic() - self._sent_at >= self.interval:
            self._report()

    def finish(self, ok: bool) -> None:
        self._done.set()
        self._send("written" if ok else "failed", self._measure())

    def _tick(self) -> None:
        while not self._done.wait(self.interval):
            if time.monotonic() - self._sent_at >= self.interval:
                self._report()

    def _report(self) -> None:
        written = self._measure()
        if written != self._sent_bytes:
            self._send("writing", written)

    def _measure(self) -> int:
        try:
            return self.bytes_on_disk()
        except OSError:  # a file renamed or removed under us: the next report counts again
            return max(0, self._sent_bytes)
