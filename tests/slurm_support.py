"""The local single-node SLURM for the tests (no tests here): `local_slurm()` runs
scripts/slurm/start.sh once per test session (a real try: install, configure, start munge,
slurmctld and slurmd) and skips with the script's own explanation when SLURM cannot start here.
`stop_what_the_tests_started()` (conftest, at the session's end) stops the daemons that start ran for
this session, and none that were running before it (CI's own, a developer's)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from ray_support import process_alive

ROOT = Path(__file__).resolve().parent.parent
START = ROOT / "scripts" / "slurm" / "start.sh"
_OUTCOME: dict[str, str | None] = {}
# the pid files scripts/slurm/start.sh's daemons write (stop.sh reads the same)
PID_FILES = {
    "slurmd": "/run/slurmd.pid",
    "slurmctld": "/run/slurmctld.pid",
    "munged": "/run/munge/munged.pid",
}
_STARTED_HERE: set[str] = set()  # the daemons this session's start.sh started


def local_slurm() -> None:
    """Make sure the local SLURM runs; pytest.skip (with the reason printed) when it cannot."""
    if "reason" not in _OUTCOME:
        before = _running_daemons()
        _OUTCOME["reason"] = _start()
        _STARTED_HERE.update(set(_running_daemons()) - set(before))
    reason = _OUTCOME["reason"]
    if reason:
        print(f"local SLURM unavailable: {reason}")
        pytest.skip(f"local SLURM unavailable: {reason}")


def _start() -> str | None:
    if os.geteuid() != 0 and shutil.which("sinfo") is None:
        return "not root and no SLURM installed (scripts/slurm/start.sh needs root to set one up)"
    try:
        done = subprocess.run(["bash", str(START)], capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return "scripts/slurm/start.sh did not finish within 10 minutes"
    if done.returncode != 0:
        return f"scripts/slurm/start.sh failed (exit {done.returncode}): {(done.stderr or done.stdout).strip()[-2000:]}"
    return None


def _running_daemons() -> dict[str, int]:
    """The daemons of PID_FILES that run now, with their process ids."""
    running = {}
    for name, pid_file in PID_FILES.items():
        try:
            pid = int(Path(pid_file).read_text().split()[0])
            os.kill(pid, 0)
        except (OSError, ValueError, IndexError):
            continue
        running[name] = pid
    return running


def stop_what_the_tests_started() -> list[str]:
    """Stop (SIGTERM, then SIGKILL after 20 s) the daemons this session's start.sh started; the
    names of those stopped. A daemon that was running before the session is left running, and so is
    the whole SLURM while it still holds a job (every job of this session's tests has ended by now:
    another session on the machine is using it)."""
    running = _running_daemons()
    stopping = {name: pid for name, pid in running.items() if name in _STARTED_HERE}
    if stopping and _jobs_of_anyone():
        print(f"\nleft SLURM running: it holds jobs of another session ({', '.join(_jobs_of_anyone())})")
        return []
    for pid in stopping.values():
        os.kill(pid, 15)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(process_alive(pid) for pid in stopping.values()):
        time.sleep(0.1)
    for pid in stopping.values():
        if process_alive(pid):
            os.kill(pid, 9)
    _STARTED_HERE.clear()
    return sorted(stopping)


def _jobs_of_anyone() -> list[str]:
    """The ids of every job SLURM holds now, pending or running (none, or SLURM not answering: [])."""
    try:
        done = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return done.stdout.split() if done.returncode == 0 else []


def slurm_jobs(name_prefix: str) -> list[str]:
    """Ids of this user's jobs still known to SLURM as pending or running whose name starts with the prefix."""
    done = subprocess.run(
        ["squeue", "-h", "-o", "%i %j %T"], capture_output=True, text=True, timeout=30, check=True
    )
    return [
        line.split()[0]
        for line in done.stdout.splitlines()
        if len(line.split()) >= 2 and line.split()[1].startswith(name_prefix)
    ]
