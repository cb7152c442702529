"""SIGTERM and SIGUSR1 sent to the launcher (a scheduler preempting the notebook's machine, SLURM's
warning before a time limit) during a launch: passed on to the ranks, which stop gracefully
(runtime/world/preemption.py); the launch then ends with LaunchPreempted.

The caller's own handlers come back when the launch ends, whatever happened ("the caller is left
as it was"). Python lets only the main thread set handlers: a launch in a background thread
(start_launch) leaves them alone, and a signal to the process keeps its usual meaning there.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any

LAUNCHER_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class LauncherSignals:
    """Context manager: while open, the preemption signals call `forward(signum)`; `received` names
    the first one that arrived (None when none did)."""

    def __init__(self, forward: Callable[[int], None]) -> None:
        self.forward = forward
        self.received: str | None = None
        self._saved: dict[int, Any] = {}

    def __enter__(self) -> LauncherSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in LAUNCHER_SIGNALS:
                if signal.getsignal(signum) is None:
                    continue  # a handler set outside Python: it could not be put back, so keep it
                self._saved[signum] = signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, *_: Any) -> None:
        for signum, previous in self._saved.items():
            signal.signal(signum, previous)
        self._saved.clear()

    def _on_signal(self, signum: int, _frame: Any) -> None:
        if self.received is None:
            self.received = signal.Signals(signum).name
        self.forward(signum)
