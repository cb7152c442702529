"""Nothing outlives the kernel: whatever a launch started from a real Jupyter kernel (workers on
every start method, the warm pool's server, its resource tracker, %ranks groups) ends within a few
seconds of the kernel's death, however the kernel dies — and a worker inside a collective or a
sleep too, not only one that prints.

Several kernels are set up at once (each setup is mostly waiting for imports), then each dies its
own way, and every process it had started is watched until it is gone.
"""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
from kernel_session import KernelSession
from live_processes import is_live

pytestmark = pytest.mark.slow  # real kernels and real workers (~20 s per test)

GONE_WITHIN = 10.0  # seconds after the kernel's death

# rank 0 sleeps; rank 1 waits for it in a barrier: one worker in time.sleep, one in a collective.
# Each rank leaves a file in the kernel's directory once it is there.
_BUSY_FUNCTION = """
def busy():
    import time
    import torch.distributed as dist
    from notebook_launcher import Accelerator
    accelerator = Accelerator()
    open(f"busy-{accelerator.process_index}", "w").close()
    if accelerator.process_index == 0:
        time.sleep(300)
    dist.barrier()
"""
_BUSY_CELL = """%%ranks
import os, time
open(f"busy-{os.environ['RANK']}", "w").close()
time.sleep(300)
"""
_STARTS = {
    "fork": "handle = start_launch(busy, num_processes=2, start_method='fork', view=False)",
    "spawn": "handle = start_launch(busy, num_processes=2, start_method='spawn', view=False)",
    "warm pool": "handle = start_launch(busy, num_processes=2, start_method='forkserver', view=False)",
    "%ranks fork": "%ranks start 2",
    "%ranks warm pool": "%ranks start 2 --start_method forkserver",
}


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _started(path: str, cwd: Path) -> tuple[KernelSession, list[psutil.Process]]:
    """A kernel running `path` with both ranks busy, and every process it started."""
    cwd.mkdir()
    session = KernelSession(cwd=str(cwd))
    if path.startswith("%ranks"):
        run = session.run("%load_ext notebook_launcher\n" + _STARTS[path], timeout=180)
        assert run.error is None, f"{path}: {run.text}"
        session.kc.execute(_BUSY_CELL)  # runs until the kernel dies
    else:
        run = session.run("from notebook_launcher import start_launch\n" + _BUSY_FUNCTION + _STARTS[path])
        assert run.error is None, f"{path}: {run.text}"
    deadline = time.monotonic() + 120
    while not ((cwd / "busy-0").exists() and (cwd / "busy-1").exists()):
        assert time.monotonic() < deadline, f"{path}: the ranks never got busy"
        time.sleep(0.1)
    return session, _descendants(session.pid)


def _die(session: KernelSession, how: str) -> None:
    if how == "SIGKILL":
        os.kill(session.pid, signal.SIGKILL)
    elif how == "SIGKILL to its process group":
        os.killpg(os.getpgid(session.pid), signal.SIGKILL)
    elif how == "restart":
        session.km.restart_kernel(now=True)
    elif how == "shutdown":
        session.km.shutdown_kernel(now=False)


def _survivors(cases: dict[str, tuple[KernelSession, list[psutil.Process]]]) -> dict[str, list[str]]:
    deadline = time.monotonic() + GONE_WITHIN
    left: dict[str, list[str]] = {}
    while True:
        left = {
            name: [f"{p.pid} {' '.join(p.cmdline()[:4])}" for p in processes if is_live(p)]
            for name, (_, processes) in cases.items()
        }
        left = {name: pids for name, pids in left.items() if pids}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def _run_cases(cases_wanted: list[tuple[str, str]], tmp_path) -> None:
    with ThreadPoolExecutor(len(cases_wanted)) as pool:
        futures = {
            f"{path} / {how}": (how, pool.submit(_started, path, tmp_path / f"case{i}"))
            for i, (path, how) in enumerate(cases_wanted)
        }
        cases = {name: future.result() for name, (how, future) in futures.items()}
    try:
        for name, (session, processes) in cases.items():
            assert processes, f"{name}: nothing was started"
            _die(session, futures[name][0])
        left = _survivors(cases)
        assert left == {}, f"still running {GONE_WITHIN:.0f} s after the kernel died: {left}"
    finally:
        for session, processes in cases.values():
            for process in processes:
                try:
                    process.kill()
                except psutil.Error:
                    pass
            try:
                session.kc.stop_channels()
                session.km.shutdown_kernel(now=True)
            except Exception:  # noqa: BLE001 - already dead
                pass


def test_a_warm_pool_launch_ends_with_its_kernel_however_it_dies(tmp_path):
    """The pool's server, its resource tracker and both workers (one in time.sleep, one inside a
    barrier) go when the kernel goes: killed alone (the OOM killer), with its group, restarted or
    shut down."""
    _run_cases(
        [("warm pool", how) for how in ("SIGKILL", "SIGKILL to its process group", "restart", "shutdown")],
        tmp_path,
    )


def test_every_start_method_ends_with_a_killed_kernel(tmp_path):
    _run_cases([(path, "SIGKILL") for path in ("fork", "spawn", "%ranks fork", "%ranks warm pool")], tmp_path)
