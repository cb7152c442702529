"""The workers as operating-system processes: start one, signal it with everything it started, and
reap it within a bound.

Each worker leads its own process group (worker/entry.py), so a signal to the group also reaches its
DataLoader workers and any subprocess the user's function started; none of them outlives a launch.

A group's id is its leader's pid, and a reaped worker's pid is free for the next process the machine
starts. A signal to the group of a worker already reaped can therefore reach a stranger: a process
that got the pid and leads a group of its own, such as a rank of another launch, which makes its
group first thing (tests/test_pid_reuse.py makes a pid repeat and shows it). So the launcher reaps
a worker only after its last signal to the group: it watches for exits without reaping
(has_exited, wait_for_exit), keeps multiprocessing from reaping its workers behind its back, and
never signals the group of a worker it no longer holds. A forkserver's worker is the forkserver's
child, reaped there the moment it exits: its group is signalled while it runs, and afterwards only
those of its members that started before its exit was seen.
"""

from __future__ import annotations

import collections
import multiprocessing.process
import os
import signal
import time
import warnings
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from ...system.fork_lock import fork_lock
from ..worker.entry import WorkerSpec, run_worker

MAX_LOG_LINES = 200_000
REAP_SECONDS = 5.0  # after SIGKILL; only a process stuck in the kernel (state D) takes longer


@dataclass
class Worker:
    """One rank's process, its three pipes, and what the launcher has read from it so far."""

    rank: int
    process: Any
    out: Connection
    err: Connection
    msg: Connection
    partial: dict[str, bytes] = field(default_factory=lambda: {"stdout": b"", "stderr": b""})
    lines: collections.deque = field(default_factory=lambda: collections.deque(maxlen=MAX_LOG_LINES))
    last_stderr: float = 0.0  # time.monotonic() of the last stderr read (where stack dumps go)
    exited: bool = False
    started: bool = False  # reached our worker code (a spawned child can die while bootstrapping)
    reported: bool = False  # sent a result or an error
    closed: bool = False  # process reaped (or given up on) and pipes closed
    exit_seen: float | None = None  # boot-clock seconds when its exit was first seen (has_exited)

    @property
    def launched(self) -> bool:
        return self.process._popen is not None

    @property
    def alive(self) -> bool:
        """Running: not exited as far as the launcher knows, and not exited now (never reaps)."""
        return not self.exited and self.launched and not has_exited(self)


def _boot_seconds() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def _child_ended(process: Any) -> bool | None:
    """For a child of ours not yet reaped (its pid still ours: running, or a zombie): whether it has
    ended, asked without reaping it. None when it is no unreaped child of ours: a forkserver's
    worker, or one already reaped (whose pid may be another's)."""
    try:
        return os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return None


def has_exited(worker: Worker) -> bool:
    """Whether the worker's process has ended, without reaping it (its pid stays ours until then);
    the first time it is seen, when (Worker.exit_seen)."""
    popen = worker.process._popen
    if popen is None:
        return False
    ended = True if popen.returncode is not None else _child_ended(worker.process)
    if ended is None:  # a forkserver's worker: its exit status comes through the sentinel
        ended = popen.poll() is not None
    if ended and worker.exit_seen is None:
        worker.exit_seen = _boot_seconds()
    return ended


def wait_for_exit(worker: Worker, bound: float) -> bool:
    """Wait up to `bound` seconds for the worker's process to end, without reaping it; whether it has.
    The sentinel can fire a moment before the exit status is collectable (or, when the user's code
    closed every descriptor, before the exit itself)."""
    deadline = time.monotonic() + bound
    wait([worker.process.sentinel], bound)
    while not has_exited(worker):
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(left, 0.001))
    return True


def start_worker(ctx: Any, spec: WorkerSpec, target: Any, into: list[Worker]) -> Worker:
    """Start one worker with pipes for stdout, stderr and messages; the parent keeps the read ends.

    The worker joins `into` before its process starts, so whatever interrupts this (Ctrl-C) leaves
    nothing that the supervisor's shutdown does not know about; the parent's write ends are closed
    in every case.
    """
    ends: list[Connection] = []
    try:
        for _ in range(3):
            ends.extend(ctx.Pipe(duplex=False))
        out_r, out_w, err_r, err_w, msg_r, msg_w = ends
        process = ctx.Process(
            target=run_worker,
            args=(spec, target, out_w, err_w, msg_w),
            name=f"notebook_launcher-rank{spec.rank}",
            daemon=False,
        )
        worker = Worker(spec.rank, process, out_r, err_r, msg_r)
        into.append(worker)
        ends = [out_w, err_w, msg_w]  # the read ends now belong to the worker
        with fork_lock():  # not while another thread warms up: system/fork_lock.py
            process.start()
        # multiprocessing reaps every finished child it knows whenever any process starts (and in
        # is_alive()), which would free a worker's pid before our last signal to its group: forget it.
        multiprocessing.process._children.discard(process)  # type: ignore[attr-defined]
    finally:
        for end in ends:
            end.close()
    return worker


def signal_group(worker: Worker, signum: int) -> None:
    """Send a signal to the worker and everything in its process group, never to a stranger's group
    (the module says why).

    A worker that has not yet made its group (it does so first thing) has started nothing either,
    so the signal to its own pid is enough then. After the worker exited its group can live on
    (its DataLoader workers, a subprocess): while we hold the worker's pid (not reaped), the group's
    id cannot be anyone else's.
    """
    pid = worker.process.pid if worker.launched else None
    if pid is None:
        return
    if _pid_is_its(worker):
        try:
            os.killpg(pid, signum)
        except (ProcessLookupError, PermissionError, OSError):
            pass
    elif worker.exit_seen is not None and _a_forkservers_child(worker.process):
        _signal_members(pid, worker.exit_seen, signum)  # gone: its members from before its exit
    if not worker.exited:
        signal_process(worker, signum)


def _pid_is_its(worker: Worker) -> bool:
    """Whether the worker's pid still names the worker (running, or a zombie of ours)."""
    popen = worker.process._popen
    if popen is None or popen.returncode is not None:
        return False
    if _child_ended(worker.process) is not None:
        return True  # an unreaped child of ours: its pid cannot be another's
    return not has_exited(worker)


def _a_forkservers_child(process: Any) -> bool:
    """Whether the forkserver started (and reaps) the process. A child of ours we reaped ourselves, and
    only after its group's last signal: nothing of its group is left to signal."""
    from multiprocessing import popen_forkserver

    return isinstance(process._popen, popen_forkserver.Popen)


def _signal_members(group: int, before: float, signum: int) -> None:
    """Signal the processes of `group` that started before `before` (boot-clock seconds): they are
    the exited leader's.

    While any of them lives the kernel gives nobody the leader's pid, so a process that has that pid
    now took it after the group emptied: the group is then a stranger's, and nothing is signalled.
    The start-time test covers a stranger's members left after it exited; it is no test for the
    stranger itself, whose start time is kept in clock ticks (10 ms) and so can read as older than
    an exit seen a moment before it started."""
    if Path(f"/proc/{group}").exists():
        return
    ticks = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == group and int(fields[19]) / ticks < before:
            try:
                os.kill(int(entry.name), signum)
            except OSError:
                pass


# How the launcher ends a worker it stops. Not SIGTERM, which asks a worker for a graceful stop
# (runtime/world/preemption.py) that a stopped or failed launch must not wait for; not SIGKILL, so that a
# rank the OOM killer ended a moment before the stop is still told apart (and named as the cause).
STOP_SIGNAL = signal.SIGHUP
STOP_SIGNALS = (STOP_SIGNAL, signal.SIGTERM)  # a stopped worker's death by these is the launcher's doing


def stop_group(worker: Worker) -> None:
    """End a worker the launcher stops (STOP_SIGNAL), and SIGTERM what it started (DataLoader
    workers, subprocesses), which may clean up."""
    signal_process(worker, STOP_SIGNAL)
    signal_group(worker, signal.SIGTERM)


def signal_process(worker: Worker, signum: int) -> None:
    """Send a signal to the worker process alone (the stack-dump request)."""
    try:
        if worker.launched and worker.process.pid is not None and _pid_is_its(worker):
            os.kill(worker.process.pid, signum)
    except (ProcessLookupError, OSError, ValueError):
        pass


def _reaped(process: Any, bound: float) -> bool:
    """Wait up to `bound` seconds for the process to end; whether it has.

    A Ctrl-C that lands between multiprocessing's waitpid() and its recording of the exit status
    leaves a child that is gone but "alive" to multiprocessing forever (waitpid then fails with
    ECHILD, which it reads as "not started yet"); ask the kernel instead, and record it.
    """
    process.join(bound)
    if process.exitcode is not None:
        return True
    try:
        pid, status = os.waitpid(process.pid, os.WNOHANG)
    except ChildProcessError:  # reaped already, its status lost with the interrupted call
        process._popen.returncode = -signal.SIGKILL
        return True
    if pid == 0:
        return False  # really still there
    process._popen.returncode = os.waitstatus_to_exitcode(status)
    return True


def kill_and_reap(worker: Worker, bound: float = REAP_SECONDS) -> None:
    """SIGKILL the worker's group, wait at most `bound` seconds for it, and close its pipes.

    Idempotent, so a second Ctrl-C in the middle can simply run it again. A process that survives
    SIGKILL for `bound` seconds is stuck in the kernel (uninterruptible I/O, a hung driver); it is
    named in a warning and left, rather than hanging the notebook with it.
    """
    if worker.closed:
        return
    stuck = False
    if worker.launched:
        signal_group(worker, signal.SIGKILL)
        stuck = not _reaped(worker.process, bound)
        if not stuck:
            worker.process.close()
    worker.exited = True
    for conn in (worker.out, worker.err, worker.msg):
        conn.close()
    worker.closed = True
    if stuck:  # last: a warning turned into an error must not leave anything open
        warnings.warn(
            f"rank {worker.rank} (pid {worker.process.pid}) did not exit within {bound:g}s of SIGKILL; it is "
            "stuck in the kernel (uninterruptible I/O or a hung driver) and is left behind. `ps -o stat "
            f"-p {worker.process.pid}` shows state D; it goes away once that I/O completes.",
            RuntimeWarning,
            stacklevel=2,
        )
