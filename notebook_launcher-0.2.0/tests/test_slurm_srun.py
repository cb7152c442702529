"""A real `srun -n 2` on the local SLURM (scripts/slurm/start.sh): a script whose Accelerator()
forms a world of 2 from the variables srun sets, and all-reduces. The variable-based twin of this
test (no SLURM needed) is in test_environments_worlds.py."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys

import pytest
from netns import clean_env
from slurm_support import local_slurm
from test_environments_worlds import SCRIPT, _results

pytestmark = pytest.mark.slow


def test_srun_smoke_two_tasks():
    """srun itself: two tasks of one step, with the variables environments.py reads."""
    local_slurm()
    probe = "import os; print(*(os.environ[k] for k in ('SLURM_PROCID', 'SLURM_NTASKS', 'SLURM_STEP_ID', 'SLURM_STEP_NODELIST')))"
    done = subprocess.run(
        ["srun", "-n", "2", "--time=2", sys.executable, "-c", probe],
        capture_output=True, text=True, timeout=120, env=clean_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = sorted(line.split() for line in done.stdout.splitlines())
    host = socket.gethostname().split(".")[0]
    assert rows == [["0", "2", rows[0][2], host], ["1", "2", rows[0][2], host]]
    assert rows[0][2] == rows[1][2]  # one step


def test_srun_two_tasks_form_a_world_of_two(tmp_path):
    local_slurm()
    assert shutil.which("srun")
    (tmp_path / "train.py").write_text(SCRIPT)
    env = clean_env(tmp_path, OMP_NUM_THREADS="1")
    done = subprocess.run(
        ["srun", "-n", "2", "--time=5", "--chdir", str(tmp_path), sys.executable, "train.py"],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    host = socket.gethostname().split(".")[0]
    rows = _results([done])
    assert rows == [
        ["SLURM (srun)", 0, 2, 0, 3.0, "0", host],  # 1 + 2 summed over the world of 2
        ["SLURM (srun)", 1, 2, 1, 3.0, "1", host],
    ]
