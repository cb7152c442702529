"""scripts/slurm/stop.sh returns once the daemons have ended (scripts/slurm/daemons.sh's stop_daemon).

It used to send SIGTERM and return. slurmctld then saves its state for a second or more, and a
start.sh run meanwhile took it for running, started no controller, and waited ~9 minutes for a node
that never came (seen when one suite run's stop.sh was followed at once by the next run's start.sh).
Here a stand-in daemon, reparented to init as the real ones are, takes a second to end after SIGTERM.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from live_processes import pid_is_live

DAEMONS = Path(__file__).resolve().parent.parent / "scripts" / "slurm" / "daemons.sh"
# A process that ends 1 s after SIGTERM, started through a parent that exits at once (as a daemon
# forks away from its starter), so that init reaps it; it writes its pid file as slurmctld does.
SLOW_TO_STOP = (
    "import os, signal, sys, time\n"
    "if os.fork():\n"
    "    sys.exit(0)\n"
    "os.setsid()\n"
    "signal.signal(signal.SIGTERM, lambda *_: (time.sleep(1.0), os._exit(0)))\n"
    "open(sys.argv[1] + '.tmp', 'w').write(str(os.getpid()))\n"
    "os.rename(sys.argv[1] + '.tmp', sys.argv[1])\n"
    "while True:\n"
    "    time.sleep(0.1)\n"
)


def _start_daemon(pid_file: Path) -> int:
    subprocess.run([sys.executable, "-c", SLOW_TO_STOP, str(pid_file)], check=True, timeout=30)
    deadline = time.monotonic() + 30
    while not pid_file.exists():
        assert time.monotonic() < deadline, "the stand-in daemon wrote no pid file"
        time.sleep(0.05)
    return int(pid_file.read_text())


def _bash(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", f"source {DAEMONS}; {script}"], capture_output=True, text=True, timeout=120
    )


def test_stop_daemon_returns_only_once_the_daemon_has_ended(tmp_path):
    pid_file = tmp_path / "daemon.pid"
    pid = _start_daemon(pid_file)
    try:
        assert _bash(f"running {pid_file}").returncode == 0
        done = _bash(f"stop_daemon {pid_file}")
        assert done.returncode == 0, done.stderr
        assert not pid_is_live(pid), "stop_daemon returned while the daemon was still ending"
        assert _bash(f"running {pid_file}").returncode != 0
        assert "did not end" not in done.stderr  # it ended on SIGTERM, no SIGKILL needed
    finally:
        if pid_is_live(pid):
            os.kill(pid, 9)


def test_stop_daemon_of_a_daemon_that_is_not_running_does_nothing(tmp_path):
    pid_file = tmp_path / "gone.pid"
    assert _bash(f"stop_daemon {pid_file}").returncode == 0  # no pid file
    pid_file.write_text("999999999")  # a pid file left by a daemon that died
    assert _bash(f"stop_daemon {pid_file}").returncode == 0
