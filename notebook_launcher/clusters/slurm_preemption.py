"""Graceful preemption of a SLURM node task: SLURM's warning (submitit's signal, USR2 by default,
and SIGTERM on preemption) becomes the workers' preemption request, so a loop that checks
`accelerator.preempted` saves and returns at the end of its step on every rank; only then does
submitit's own handler requeue the job (its `checkpoint()` and `scontrol requeue`).

The workers never see SLURM's signals themselves (they are blocked in them): a second SIGTERM
would end them at once, and SIGUSR2 would mean nothing to them. Each gets one request from here,
a real-time signal that is never blocked there (notebook_launcher/system/signals.py) whichever signal
submitit was told to use (SUBMITIT_PREEMPT_SIGNAL=USR1 included), read by runtime/world/preemption.py.
A function that never checks is stopped after a grace period
(NOTEBOOK_LAUNCHER_SLURM_GRACE_SECONDS, 60 s: submitit's signal comes 90 s before the time limit)
and requeued all the same, cut off at its last checkpoint as before.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from ..records.names import SLURM_GRACE_ENV
from ..system.signals import PREEMPTION_REQUEST_SIGNAL

REQUEST_SIGNAL = PREEMPTION_REQUEST_SIGNAL  # what a worker reads as "stop after this step"
GRACE_SECONDS = 60.0


def requeue_signal() -> signal.Signals:
    """submitit's preemption / time-limit signal (SUBMITIT_PREEMPT_SIGNAL, USR2 by default)."""
    name = "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")
    return getattr(signal, name, signal.SIGUSR2)


def grace_seconds() -> float:
    try:
        return float(os.environ.get(SLURM_GRACE_ENV, GRACE_SECONDS))
    except ValueError:
        return GRACE_SECONDS


class SlurmPreemption:
    """Context manager for the task's main thread: while open, SIGTERM and submitit's signal ask the
    workers to stop (`request(signum)` once) and arm `stop` after the grace period; `requeue()`
    then hands the signal to submitit's handler, which was set before the task ran."""

    def __init__(self, request: Callable[[int], None], stop: Callable[[], None]) -> None:
        self.request = request
        self.stop = stop
        self.signals = (signal.SIGTERM, requeue_signal())
        self.received: list[str] = []  # the signals that came, in order
        self._saved: dict[int, Any] = {}
        self._timer: threading.Timer | None = None
        self._deadline = 0.0

    @property
    def requested(self) -> bool:
        return bool(self.received)

    @property
    def requeue_asked(self) -> bool:
        return self.signals[1].name in self.received

    def __enter__(self) -> SlurmPreemption:
        for signum in self.signals:
            self._saved[signum] = signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, *_: Any) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for signum, previous in self._saved.items():
            signal.signal(signum, previous)
        self._saved.clear()

    def _on_signal(self, signum: int, _frame: Any) -> None:
        first = not self.received
        self.received.append(signal.Signals(signum).name)
        if first:
            self._deadline = time.monotonic() + grace_seconds()
            self._timer = threading.Timer(grace_seconds(), self.stop)
            self._timer.daemon = True
            self._timer.start()
            self.request(REQUEST_SIGNAL)

    def requeue(self) -> None:
        """The ranks are done (returned, failed or stopped): let submitit requeue the job. A SIGTERM
        alone waits out the grace period for submitit's signal (SLURM sends both on preemption);
        without it there is nothing to requeue and this returns."""
        while not self.requeue_asked and time.monotonic() < self._deadline:
            time.sleep(0.05)  # the handler runs in this thread, between sleeps
        if not self.requeue_asked:
            return
        handler = self._saved.get(self.signals[1])
        self.__exit__()
        if callable(handler):
            handler(self.signals[1], None)  # submitit: checkpoint(), scontrol requeue, exit (node 0)
        raise SystemExit(-1)  # other nodes: the requeue ends this attempt; no stale result behind
