"""Where each running worker is: ask for a stack dump, know when it has arrived, make it readable."""

from __future__ import annotations

import itertools
import linecache
import re
import time
from collections.abc import Sequence

from ...system.signal_delivery import SignalDelivery
from ...system.signals import STACK_DUMP_SIGNAL
from ..worker import entry as _worker_module
from ..worker import memory_sampler as _sampler_module
from .processes import Worker

_FRAME = re.compile(r'^\s*File "(?P<file>.+)", line (?P<line>\d+) in (?P<func>.+)$')
DUMP_HEADER = "(most recent call first):"  # faulthandler's first line for each thread
QUIET_SECONDS = 0.1  # where /proc cannot tell: this long without output after the header means done
MAX_WAIT_SECONDS = 5.0  # for a rank that cannot run its handler (stopped, or stuck in the kernel)
_WORKER_FILE = _worker_module.__file__
_ENTRY_FRAMES = ("run_prepared", "run_worker")
_SAMPLER_FILE = _sampler_module.__file__  # the launcher's own thread in each worker
_THREAD_HEADER = re.compile(r"^(Current thread|Thread) 0x[0-9a-f]+ ")


class StackDump:
    """The dumps asked of some workers (faulthandler on STACK_DUMP_SIGNAL): which of each worker's
    output lines belong to it, and whether every dump is complete.

    faulthandler prints from its C signal handler, so a dump arrives even from a rank stuck inside a
    collective, but it marks no end. A dump is complete once the worker's handler has returned
    (system/signal_delivery.py reads that from /proc) and its stderr pipe has been read to the end,
    or once the worker has exited. Where /proc cannot tell: once its header has arrived and stderr
    has been quiet for QUIET_SECONDS, which a writer descheduled mid-dump on a busy machine can
    fake (CI saw a report cut after its first frame). MAX_WAIT_SECONDS at most. Create it before
    sending the signals: it notes which threads block the signal beforehand.
    """

    def __init__(self, workers: Sequence[Worker]) -> None:
        self.workers = list(workers)
        self.marks = {w.rank: len(w.lines) for w in self.workers}
        self.deliveries = {w.rank: SignalDelivery(w.process.pid, STACK_DUMP_SIGNAL) for w in self.workers}
        self.asked_at = time.monotonic()

    def complete(self) -> bool:
        now = time.monotonic()
        if now - self.asked_at > MAX_WAIT_SECONDS:
            return True
        return all(self._arrived(w, now) for w in self.workers)

    def _arrived(self, worker: Worker, now: float) -> bool:
        if not worker.alive:  # exited: whatever it wrote is in its pipe (a zombie handles nothing)
            return True
        handled = self.deliveries[worker.rank].handled()
        if handled is not None:
            return handled and (worker.err.closed or not worker.err.poll(0))
        since = itertools.islice(worker.lines, self.marks[worker.rank], None)
        dumped = any(DUMP_HEADER in line for line in since)
        return dumped and now - worker.last_stderr >= QUIET_SECONDS

    def texts(self) -> dict[int, str]:
        """What each worker printed since the request: the user's frames, with source lines."""
        return {w.rank: readable("\n".join(list(w.lines)[self.marks[w.rank] :])) for w in self.workers}


def readable(dump: str) -> str:
    return with_source_lines(without_launcher_frames(without_launcher_threads(dump)))


def without_launcher_threads(dump: str) -> str:
    """Leave out the threads the launcher itself runs in a worker (the memory sampler): they wait
    in a loop of ours and say nothing about where the user's code is."""
    out: list[str] = []
    block: list[str] = []
    in_thread = False
    for line in dump.splitlines():
        if _THREAD_HEADER.match(line) or not (in_thread and (not line.strip() or line.startswith("  "))):
            out.extend(_unless_launcher_thread(block))
            block, in_thread = [], bool(_THREAD_HEADER.match(line))
        (block if in_thread else out).append(line)
    out.extend(_unless_launcher_thread(block))
    return "\n".join(out)


def _unless_launcher_thread(block: list[str]) -> list[str]:
    frames = (_FRAME.match(line) for line in block)
    return [] if any(m and m["file"] == _SAMPLER_FILE for m in frames) else block


def without_launcher_frames(dump: str) -> str:
    """Cut each thread's stack at the worker's frame that calls the user's function (run_prepared,
    or run_worker before it got there): what lies below it is the launcher's start-up (under fork,
    the whole kernel's stack, inherited; in a warm-pool worker, the pool's), never the user's code."""
    out, skipping = [], False
    for line in dump.splitlines():
        match = _FRAME.match(line)
        if match is None:
            skipping = False  # a thread header, a blank line or other output
        elif match["file"] == _WORKER_FILE and match["func"] in _ENTRY_FRAMES:
            skipping = True
        if not skipping:
            out.append(line)
    return "\n".join(out)


def with_source_lines(dump: str) -> str:
    """faulthandler prints file and line only; add the source line (works for notebook cells too,
    whose source the kernel keeps in linecache)."""
    out = []
    for line in dump.splitlines():
        out.append(line)
        match = _FRAME.match(line)
        if match:
            source = linecache.getline(match["file"], int(match["line"])).strip()
            if source:
                out.append(f"    {source}")
    return "\n".join(out)
