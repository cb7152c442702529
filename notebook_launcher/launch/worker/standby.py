"""A warm-pool worker (warm/pool.py): forked ahead of time from the pool's server, where torch and our
runtime are already imported, it waits for one launch, takes on that launch's state, runs it as
any worker does (worker/entry.py), and exits.

It was forked before the launch existed, so it must not carry any state from that earlier moment:
the kernel's environment, working directory and sys.path *as they are at the launch* replace its
own, and its random generators are reseeded from fresh entropy, as in a newly spawned process (all
forks of one server would otherwise draw the same `random` numbers). Threads, the launch config
and the env contract come with the worker's spec, as for every launch.
"""

from __future__ import annotations

import os
import pickle
import sys
from dataclasses import dataclass, field
from multiprocessing.connection import Connection


@dataclass
class LaunchState:
    """What the kernel looks like at the launch, for a worker that was started earlier."""

    environ: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    cwd: str = field(default_factory=os.getcwd)
    sys_path: list[str] = field(default_factory=lambda: list(sys.path))


def adopt(state: LaunchState) -> None:
    """Become a process started now: the kernel's env, cwd and sys.path; fresh random generators."""
    os.environ.clear()
    os.environ.update(state.environ)
    try:
        os.chdir(state.cwd)
    except OSError:  # the kernel's cwd is gone: a fresh spawn would fail there too; stay where we are
        pass
    sys.path[:] = state.sys_path
    import random

    random.seed()  # from os.urandom, as at interpreter start
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()  # numpy's global generator, from fresh entropy as at its import
    torch = sys.modules.get("torch")
    if torch is not None:
        # torch seeds its CPU generator from fresh entropy at import, too; its CUDA generators are
        # seeded when CUDA starts, in this worker as in a fresh process (torch.seed() would also
        # walk every device type: 1.5 ms of a warm launch)
        torch.default_generator.seed()


def standby_worker(
    out_conn: Connection, err_conn: Connection, msg_conn: Connection, assign: Connection
) -> None:
    """Entry point of a warm-pool worker: prepare, wait for (spec, LaunchState), run, exit."""
    from .entry import prepare_process, run_prepared

    prepare_process(out_conn, err_conn)
    try:
        spec, state = pickle.loads(assign.recv_bytes())
    except (EOFError, OSError, KeyboardInterrupt):
        os._exit(0)  # released by the pool before any launch: nothing to report
    finally:
        assign.close()
    adopt(state)
    run_prepared(spec, None, msg_conn)
