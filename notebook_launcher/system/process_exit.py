"""Ending a process of ours whose work is done, without Python's teardown of the modules it loaded.

After its atexit handlers, Python tears every module down. With torch loaded that takes most of a
second on our 2-core machine, which `notebook-launcher launch` made its user wait for after the
last rank had ended (1.03 s from that end to the command's exit, 0.31 s without the teardown:
benchmarks/exit_latency.py); and torch 2.13 sometimes aborts in C++ static destruction after a
script that succeeded, which a worker would report as a failed rank.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn


def leave(code: int) -> NoReturn:
    """End this process with `code` after what Py_Finalize does first: wait for its non-daemon
    threads (and threading's own exit hooks, which end thread pools), run the atexit handlers
    (logging, multiprocessing, a process group's teardown), flush the standard streams."""
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()
    flush_standard_streams()
    os._exit(code)


def flush_standard_streams() -> None:
    """What os._exit would lose: text still buffered in sys.stdout/stderr (and the originals, where
    something replaced them). A stream already closed or gone is left alone."""
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
