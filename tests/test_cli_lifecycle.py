"""`notebook-launcher launch` leaves nothing behind: workers die with their launcher (issue 11)."""

from __future__ import annotations

import os
import signal
import time

from live_processes import pid_is_live
from test_cli_helpers import cli_env, start_cli

SLEEPER = """
import os, sys, time
rank = os.environ["RANK"]
path = os.path.join(sys.argv[1], f"pid{rank}")
with open(path + ".tmp", "w") as fp:
    fp.write(str(os.getpid()))
os.rename(path + ".tmp", path)
time.sleep(120)
"""


def test_workers_die_when_the_launcher_is_killed(tmp_path):
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    launcher = start_cli(
        ["launch", "--num_processes", "2", "sleeper.py", str(tmp_path)], cwd=tmp_path, env=cli_env(tmp_path)
    )
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 90
        while len(list(tmp_path.glob("pid?"))) < 2:
            assert launcher.poll() is None and time.monotonic() < deadline, launcher.communicate()
            time.sleep(0.1)
        pids = [int(p.read_text()) for p in tmp_path.glob("pid?")]
        # Each worker runs in a session of its own (torchrun's choice), so no signal to the launcher's
        # group reaches it; an OOM killer or a scheduler kills just the launcher, like this.
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.communicate(timeout=30)
        deadline = time.monotonic() + 10
        while any(pid_is_live(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in pids if pid_is_live(pid)], "a worker outlived its killed launcher"
    finally:
        for pid in pids:  # without the fix they would run on for two minutes
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.communicate()
