"""`notebook-launcher launch` leaves nothing behind: workers die with their launcher (issue 11); and it
ends without Python's teardown of torch once its ranks are done (system/process_exit.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from live_processes import pid_is_live
from test_cli_helpers import cli_env, explain, run_cli, start_cli

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


# Loaded by every Python started with this folder on PYTHONPATH: an object whose finalizer runs only
# when Python tears its modules down at exit, and leaves a file saying which command did.
TEARDOWN_WITNESS = """
import os, sys

_MARK = os.path.join(os.environ["TEARDOWN_MARKS"], f"torn-down-{os.getpid()}").encode()
_COMMAND = " ".join(sys.orig_argv).encode()


class _Witness:
    # Builtins such as open() may be gone by then: what it needs is bound now.
    def __del__(self, mark=_MARK, command=_COMMAND, os_open=os.open, write=os.write, close=os.close,
                flags=os.O_WRONLY | os.O_CREAT):
        fd = os_open(mark, flags, 0o600)
        write(fd, command)
        close(fd)


_witness = _Witness()
"""


def test_the_launcher_and_its_workers_end_without_tearing_torch_down(tmp_path):
    """Python's teardown of torch cost the launcher 0.7 s after the last rank ended
    (benchmarks/exit_latency.py); the launcher and its workers end after their atexit handlers."""
    site, marks = tmp_path / "site", tmp_path / "marks"
    site.mkdir()
    marks.mkdir()
    (site / "sitecustomize.py").write_text(TEARDOWN_WITNESS)
    (tmp_path / "hello.py").write_text("import os\nprint('hello from', os.environ['RANK'])\n")
    env = cli_env(tmp_path, TEARDOWN_MARKS=str(marks))
    env["PYTHONPATH"] = os.pathsep.join([str(site), env["PYTHONPATH"]])
    # The witness works: a Python that exits the normal way leaves its mark.
    subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
    assert [p.read_text() for p in marks.iterdir()] == [f"{sys.executable} -c pass"]
    (next(marks.iterdir())).unlink()
    result = run_cli(["launch", "--num_processes", "2", "--cpu", "hello.py"], cwd=tmp_path, env=env)
    assert result.returncode == 0, explain(result)
    assert "hello from 0" in result.stdout and "hello from 1" in result.stdout, explain(result)
    assert [p.read_text() for p in marks.iterdir()] == []  # neither the launcher nor a worker
