"""Whether a process has finished handling a signal sent to it, read from /proc (Linux).

A handler installed without SA_NODEFER (faulthandler's user-signal handler with chain=False) runs
with its signal blocked in the thread running it, and before delivery the signal is pending. So once
the signal was sent, "not pending, and blocked by no thread that did not block it before" means the
handler has returned: a stack dump it wrote is whole in its pipe, however long the process was
descheduled while writing it. Waiting for the dump's output to go quiet cannot tell that on a busy
machine, where a writer can stop for longer than any quiet period in the middle of a line.
"""

from __future__ import annotations

import os
from pathlib import Path


def _mask(status: Path, name: str) -> int | None:
    """A signal mask field (SigBlk, ShdPnd, ...) of a /proc status file; None if unreadable."""
    try:
        for line in status.read_text().splitlines():
            if line.startswith(name + ":"):
                return int(line.split()[1], 16)
    except (OSError, ValueError, IndexError):
        return None
    return None


def threads_blocking(pid: int, signum: int) -> frozenset[int] | None:
    """The threads of `pid` that block `signum` now; None when /proc cannot tell (no such process,
    not Linux). A thread that ends while being read counts as not blocking."""
    bit = 1 << (signum - 1)
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    blocking = set()
    for tid in tids:
        mask = _mask(Path(f"/proc/{pid}/task/{tid}/status"), "SigBlk")
        if mask is not None and mask & bit:
            blocking.add(int(tid))
    return frozenset(blocking)


def is_pending(pid: int, signum: int) -> bool | None:
    """Whether a process-directed `signum` (os.kill) waits to be delivered to `pid`."""
    shared = _mask(Path(f"/proc/{pid}/status"), "ShdPnd")
    return None if shared is None else bool(shared & (1 << (signum - 1)))


class SignalDelivery:
    """One signal about to be sent to one process: create it before sending, then ask handled()."""

    def __init__(self, pid: int | None, signum: int) -> None:
        self.pid, self.signum = pid, signum
        self.blocking_before = threads_blocking(pid, signum) if pid is not None else None

    def handled(self) -> bool | None:
        """True once the process has handled the signal, False while it is pending or its handler
        runs, None when /proc cannot tell (the process is gone, or this is not Linux)."""
        if self.pid is None or self.blocking_before is None:
            return None
        # Pending first: a signal delivered after this read is seen blocked by the read below.
        pending = is_pending(self.pid, self.signum)
        blocking = threads_blocking(self.pid, self.signum)
        if pending is None or blocking is None:
            return None
        return not pending and not blocking - self.blocking_before
