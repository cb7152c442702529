"""The two signals our launchers send their workers besides the stop, in one place for the sender
(launch/, clusters/) and the receiver (launch/worker/entry.py, runtime/world/preemption.py).

Both are real-time signals, which no scheduler sends: SLURM node tasks keep the scheduler's own
signals (SIGTERM, submitit's SIGUSR2 or SIGUSR1) blocked in their workers and pass them on
themselves, so a request on one of those would never arrive. glibc keeps the first two real-time
signals for itself; signal.SIGRTMIN is already past them.
"""

from __future__ import annotations

import signal

STACK_DUMP_SIGNAL: int = signal.SIGRTMIN + 4  # "print where every thread is" (faulthandler); 38 on glibc
PREEMPTION_REQUEST_SIGNAL: int = signal.SIGRTMIN + 5  # "stop after this step" from a node launcher; 39


def signal_name(signum: int) -> str:
    """SIGTERM, SIGUSR1, ... or, for ours, what it means."""
    if signum == PREEMPTION_REQUEST_SIGNAL:
        return "the launcher's preemption request"
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
