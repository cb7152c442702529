"""How the warm pool's server ends: at once, without Python's teardown of what it loaded.

The server leaves when its kernel goes (the kernel's end of its pipe closes: the kernel was killed,
restarted or shut down, or released the pool), and its children, the waiting workers and a
`%ranks` group's ranks, die only once it is gone (PR_SET_PDEATHSIG). A normal exit runs torch's
atexit work (it unregisters each of its operator libraries one by one) and then tears every module
down, while the ranks of a killed kernel go on running: 1.48 s on our 2-core machine, against
0.065 s without (benchmarks/exit_latency.py), 4 to 11 s for a killed Jupyter kernel's `%ranks`
group here, and over 10 s on a loaded CI machine.

Imported last of the server's preloads (pool.ensure_server), so that its atexit handler, registered
last, runs first; importing it does the work, on purpose.
"""

from __future__ import annotations

import atexit
import multiprocessing.util
import os

from ...system.process_exit import flush_standard_streams

_SERVER_PID = os.getpid()


def _exit_now() -> None:
    if os.getpid() != _SERVER_PID:
        return  # a worker forked from the server inherited the registration; it ends its own way
    finalizers = getattr(multiprocessing.util, "_exit_function", None)  # registered before this one
    if finalizers is not None:
        finalizers()  # multiprocessing's own exit work, which would not run otherwise
    flush_standard_streams()
    os._exit(0)


atexit.register(_exit_now)
