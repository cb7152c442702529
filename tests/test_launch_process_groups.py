"""What a worker starts ends with it (issue 11, section 3): DataLoader workers and subprocesses do
not survive a failure, a stop, a timeout or a clean finish; and reaping is bounded."""

from __future__ import annotations

import os
import subprocess
import time
import warnings

import pytest
from live_processes import pid_is_live

from notebook_launcher import LaunchStopped, LaunchTimeout, WorkerError, notebook_launch, start_launch
from notebook_launcher.launch.supervise.processes import Worker, kill_and_reap


def starts_grandchildren(directory, then):
    """Start a subprocess and DataLoader workers, write their pids, then fail / hang / return."""
    import torch
    from torch.utils.data import DataLoader

    from notebook_launcher import Accelerator

    acc = Accelerator()
    sleeper = subprocess.Popen(["sleep", "300"])
    loader = iter(DataLoader(torch.arange(64.0), batch_size=4, num_workers=2, persistent_workers=True))
    next(loader)
    pids = [sleeper.pid, *(w.pid for w in loader._workers)]
    path = os.path.join(directory, f"rank{acc.process_index}.pids")
    with open(path + ".tmp", "w") as fp:
        fp.write(" ".join(map(str, pids)))
    os.rename(path + ".tmp", path)  # complete when it appears
    print("grandchildren started", flush=True)
    if then == "fail" and acc.process_index == 1:
        while not os.path.exists(os.path.join(directory, "rank0.pids")):  # both ranks have started theirs
            time.sleep(0.05)
        raise RuntimeError("planned failure")
    if then in ("hang", "fail"):
        time.sleep(300)
    return len(pids)


def _grandchildren(directory) -> list[int]:
    return [int(pid) for path in directory.glob("rank*.pids") for pid in path.read_text().split()]


def _wait_gone(pids: list[int], seconds: float = 5.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while any(pid_is_live(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [pid for pid in pids if pid_is_live(pid)]


def _stop_when_started(handle, directory) -> None:
    deadline = time.monotonic() + 60
    while len(list(directory.glob("rank*.pids"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)
    handle.stop()
    handle.wait(60)


@pytest.mark.parametrize("outcome", ["failure", "stop", "timeout", "success"])
def test_what_a_worker_started_ends_with_the_launch(tmp_path, outcome):
    args = (str(tmp_path), {"failure": "fail", "success": "return"}.get(outcome, "hang"))
    if outcome == "failure":
        with pytest.raises(WorkerError, match="planned failure"):
            notebook_launch(starts_grandchildren, args=args, num_processes=2, quiet=True, timeout=120)
    elif outcome == "timeout":
        with pytest.raises(LaunchTimeout):
            # long enough for both ranks to start their DataLoader workers on a loaded machine
            notebook_launch(starts_grandchildren, args=args, num_processes=2, quiet=True, timeout=8)
    elif outcome == "stop":
        handle = start_launch(starts_grandchildren, args=args, num_processes=2, quiet=True)
        with pytest.raises(LaunchStopped):
            _stop_when_started(handle, tmp_path)
    else:
        assert list(notebook_launch(starts_grandchildren, args=args, num_processes=2, quiet=True)) == [3, 3]
    pids = _grandchildren(tmp_path)
    assert len(pids) == 6, pids  # 2 ranks x (a subprocess + 2 DataLoader workers)
    # They are not our children (their parent, the worker, is gone), so only their pids tell.
    assert _wait_gone(pids) == [], "a process started by a worker outlived the launch"


class _Unkillable:
    """Stands in for a process stuck in the kernel (state D), which even SIGKILL cannot end: a test
    cannot make a real one without a hung device or file system. join(timeout) waits and gives up,
    and the kernel (os.waitpid, patched below) says it is still there."""

    pid = None  # nothing to signal
    exitcode = None
    _popen = object()

    def __init__(self):
        self.joins = []

    def join(self, timeout=None):
        assert timeout is not None, "an unbounded join would hang the notebook forever"
        self.joins.append(timeout)
        time.sleep(timeout)

    def is_alive(self):
        return True

    def close(self):
        raise AssertionError("close() of a running process raises ValueError")


def _pipes(multiprocessing):
    return [end for _ in range(3) for end in multiprocessing.Pipe(duplex=False)]


def test_reaping_a_worker_that_survives_sigkill_is_bounded_and_named(monkeypatch):
    import multiprocessing

    from notebook_launcher.launch.supervise import processes

    monkeypatch.setattr(processes.os, "waitpid", lambda pid, flags: (0, 0))  # "still running"
    ends = _pipes(multiprocessing)
    worker = Worker(7, _Unkillable(), ends[0], ends[2], ends[4])
    start = time.monotonic()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kill_and_reap(worker, bound=0.2)
    assert worker.process.joins == [0.2] and time.monotonic() - start < 30
    assert any("rank 7" in str(w.message) and "state D" in str(w.message) for w in caught)
    assert worker.out.closed and worker.err.closed and worker.msg.closed  # its pipes are closed anyway
    for end in ends[1::2]:
        end.close()


def test_a_worker_reaped_behind_multiprocessings_back_is_still_closed():
    """What a Ctrl-C between multiprocessing's waitpid() and its bookkeeping leaves: a child the
    kernel has reaped but multiprocessing believes alive. It must be closed, not reported stuck."""
    import multiprocessing

    fds = len(os.listdir("/proc/self/fd"))
    ends = _pipes(multiprocessing)
    process = multiprocessing.get_context("fork").Process(target=os._exit, args=(0,))
    process.start()
    os.waitpid(process.pid, 0)  # reaped here, as the interrupted call did
    assert process.is_alive()  # multiprocessing cannot tell any more
    worker = Worker(3, process, ends[0], ends[2], ends[4])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kill_and_reap(worker, bound=5)
    assert not [w for w in caught if "did not exit" in str(w.message)]
    for end in ends[1::2]:
        end.close()
    assert len(os.listdir("/proc/self/fd")) == fds  # the process's sentinel was closed too


def test_what_a_warm_pool_worker_started_ends_after_it_returned(tmp_path):
    """A warm-pool worker is the forkserver's child, reaped there the moment it exits, so its pid may
    be another process's by the time the launcher ends its group: what it started is found by start
    time instead (launch/supervise/processes.py) and ends all the same."""
    args = (str(tmp_path), "return")
    launched = notebook_launch(
        starts_grandchildren, args=args, num_processes=2, quiet=True, start_method="forkserver"
    )
    assert list(launched) == [3, 3]
    pids = _grandchildren(tmp_path)
    assert len(pids) == 6, pids
    assert _wait_gone(pids) == [], "a process started by a warm-pool worker outlived the launch"
