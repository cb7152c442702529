"""A launch's signals never reach a process that took the pid of one of its ended workers.

A worker leads its own process group, whose id is its pid. The launcher used to reap a worker as soon
as it exited and then SIGKILL its group, once then and again at the launch's end; by then the pid
could belong to another process that leads a group of its own, such as a rank of another launch,
and the SIGKILL ended it. launch/supervise/processes.py says how the launcher avoids it.

Pids are made to repeat on purpose in a PID namespace of the test's own (`unshare --pid`, root; CI
runs as root), where ns_last_pid picks the next pid and nothing else starts processes.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from notebook_launcher.launch.supervise.processes import _signal_members

ROOT = Path(__file__).resolve().parent.parent

# Runs inside the namespace. Prints one line per case: "<case> stranger alive" or "... killed".
SCRIPT = textwrap.dedent(
    """
    import multiprocessing, os, signal, subprocess, sys, time

    from notebook_launcher import notebook_launch
    from notebook_launcher.launch.supervise.processes import Worker, signal_group


    def take_pid(pid):
        # The next process started gets `pid` when it is free (nothing else runs in this namespace).
        with open("/proc/sys/kernel/ns_last_pid", "w") as handle:
            handle.write(str(pid - 1))
        return subprocess.Popen(["sleep", "300"], start_new_session=True)  # leads its own group


    def alive(process):
        try:
            process.wait(timeout=1)  # a SIGKILL ends it within milliseconds
        except subprocess.TimeoutExpired:
            return True
        return False


    # 1. signal_group on a worker that was reaped (its pid freed) and whose pid a stranger took.
    context = multiprocessing.get_context("fork")
    reader, _ = context.Pipe(duplex=False)
    process = context.Process(target=os.getpid)
    process.start()
    process.join()
    worker = Worker(0, process, reader, reader, reader)
    # The launcher saw the exit, then reaped. A start time is kept in clock ticks (10 ms), so a
    # stranger that takes the pid within a tick reads as older than the exit: "a second after" says so.
    worker.exit_seen = time.clock_gettime(time.CLOCK_BOOTTIME) + 1
    stranger = take_pid(process.pid)
    assert stranger.pid == process.pid, (stranger.pid, process.pid)
    signal_group(worker, signal.SIGKILL)
    print("reaped-worker stranger", "alive" if alive(stranger) else "killed", flush=True)
    stranger.kill()
    stranger.wait()


    # 2. A launch: rank 0 returns at once; rank 1 waits until rank 0's pid is free (the launcher
    # reaped it) or 5 s have passed, then starts a stranger on that pid if it can; the launch ends.
    def rank_function(queue_dir):
        rank = int(os.environ["RANK"])
        path = os.path.join(queue_dir, "rank0.pid")
        if rank == 0:
            with open(path + ".tmp", "w") as handle:
                handle.write(str(os.getpid()))
            os.rename(path + ".tmp", path)
            return None
        while not os.path.exists(path):
            time.sleep(0.01)
        pid = int(open(path).read())
        deadline = time.monotonic() + 5
        while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
            time.sleep(0.01)
        stranger = take_pid(pid)
        return [pid, stranger.pid]


    queue_dir = sys.argv[1]
    results = notebook_launch(rank_function, args=(queue_dir,), num_processes=2, quiet=True)
    pid, stranger_pid = results[1]
    try:
        os.kill(stranger_pid, 0)
        state = open(f"/proc/{stranger_pid}/stat").read().rsplit(") ", 1)[1][0]
        verdict = "killed" if state == "Z" else "alive"
    except ProcessLookupError:
        verdict = "killed"
    print("launch stranger", verdict, "(took the rank's pid)" if stranger_pid == pid else "(got another pid)", flush=True)
    if verdict == "alive":
        os.kill(stranger_pid, signal.SIGKILL)
    """
)


def _namespace_skip_reason() -> str | None:
    if not sys.platform.startswith("linux"):
        return "PID namespaces need Linux"
    if os.geteuid() != 0:
        return "a PID namespace of the test's own needs root (CI runs the suite as root)"
    if shutil.which("unshare") is None:
        return "`unshare` (Debian package util-linux) is not installed"
    return None


def test_no_signal_reaches_a_process_that_took_an_ended_workers_pid(tmp_path: Path) -> None:
    reason = _namespace_skip_reason()
    if reason:
        pytest.skip(reason)
    script = tmp_path / "in_namespace.py"
    script.write_text(SCRIPT)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, str(script), str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = dict(line.split(" stranger ", 1) for line in done.stdout.splitlines() if " stranger " in line)
    assert lines.get("reaped-worker", "").startswith("alive"), done.stdout + done.stderr
    assert lines.get("launch", "").startswith("alive"), done.stdout + done.stderr


def test_a_group_id_a_stranger_leads_now_is_not_signalled_as_a_forkserver_workers() -> None:
    """A forkserver's worker is reaped there at once; its members are signalled by start time, which
    is kept in clock ticks. A stranger that took the pid leads the group with that id: left alone,
    whatever the exit time says."""
    stranger = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        _signal_members(stranger.pid, time.clock_gettime(time.CLOCK_BOOTTIME) + 60, signal.SIGKILL)
        with pytest.raises(subprocess.TimeoutExpired):
            stranger.wait(timeout=0.5)  # a SIGKILL ends it within milliseconds
    finally:
        stranger.kill()
        stranger.wait()
