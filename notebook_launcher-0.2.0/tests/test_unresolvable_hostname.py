"""A machine whose hostname resolves to nothing (a fresh root, a container): one-machine launches
keep gloo on loopback themselves, so no rank prints gloo's C++ "Unable to resolve hostname" warning.

Run for real in a UTS namespace with a hostname that resolves nowhere (`unshare -u`, as root).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BOGUS = "nl-unresolvable-host-7f3a"
WARNING = "Unable to resolve hostname"

NOTEBOOK = """
import os
from notebook_launcher import Accelerator, notebook_launch

def reduce_ones():
    import torch
    return float(Accelerator().reduce(torch.ones(1), "sum")), os.environ.get("GLOO_SOCKET_IFNAME")

if __name__ == "__main__":
    print("RESULT", list(notebook_launch(reduce_ones, num_processes=2)))
"""
SCRIPT = """
import os, torch
from notebook_launcher import Accelerator
print("RESULT", float(Accelerator().reduce(torch.ones(1), "sum")), os.environ.get("GLOO_SOCKET_IFNAME"), flush=True)
"""

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("hostname") is None,
    reason="needs root and unshare(1) to give a process a hostname that resolves nowhere",
)


def _under_bogus_hostname(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    with pytest.raises(socket.gaierror):
        socket.getaddrinfo(BOGUS, None)  # the premise: this name resolves nowhere
    env = {k: v for k, v in os.environ.items() if not k.endswith("_SOCKET_IFNAME")}
    env["PYTHONPATH"] = str(ROOT)
    command = f'hostname {BOGUS} && exec "$@"'
    return subprocess.run(
        ["unshare", "-u", "sh", "-c", command, "sh", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip


def test_notebook_launch_prints_no_hostname_warning(tmp_path):
    (tmp_path / "run.py").write_text(NOTEBOOK)
    done = _under_bogus_hostname([sys.executable, "run.py"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert WARNING not in done.stdout + done.stderr, done.stderr
    assert "RESULT [(2.0, 'lo'), (2.0, 'lo')]" in done.stdout, done.stdout


def test_the_cli_prints_no_hostname_warning(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    cli = [sys.executable, "-m", "notebook_launcher", "launch", "--num_processes", "2", "train.py"]
    done = _under_bogus_hostname(cli, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    output = done.stdout + done.stderr
    assert WARNING not in output, output
    assert output.count("RESULT 2.0 lo") == 2, output
