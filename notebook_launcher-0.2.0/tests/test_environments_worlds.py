"""Real worlds formed by `Accelerator()` from a scheduler's variables on this host: mpirun -n 2 with
Debian's Open MPI, and 2 processes given the variables srun and a Kubeflow PyTorchJob set.
(The same across two network namespaces: test_network_namespaces.py.)"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys

import pytest
from netns import accelerator_all_reduce_script, clean_env, explain, finish_all, popen_in_session
from test_cli_helpers import free_port

from notebook_launcher.system.network import port_is_free
from notebook_launcher.system.schedulers import derived_port


def slurm_port(job: int) -> int:
    return derived_port(f"slurm:{job}.0")  # what every task of step 0 of that job derives


pytestmark = pytest.mark.slow

SCRIPT = accelerator_all_reduce_script('os.environ["RANK"], os.environ["MASTER_ADDR"]')


def _start(env: dict[str, str], cwd, argv=None) -> subprocess.Popen:
    return popen_in_session(argv or [sys.executable, "train.py"], env, cwd)


def _results(done) -> list:
    """Every rank's RESULT row. mpirun merges the ranks' stdout, and an unbuffered print writes its
    text and its newline separately, so one rank's row can end where the next rank's begins."""
    rows = [json.loads(found) for r in done for found in re.findall(r"RESULT (\[[^\]]*\])", r.stdout)]
    return sorted(rows, key=lambda row: row[1])


def test_mpirun_forms_a_world_of_two(tmp_path):
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip(
            "mpirun not found: install Debian's Open MPI (apt-get install openmpi-bin; see scripts/install.sh)"
        )
    (tmp_path / "train.py").write_text(SCRIPT)
    env = clean_env(
        tmp_path, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1"
    )
    argv = [mpirun, "-n", "2", "--oversubscribe", "--allow-run-as-root", "-x", "PYTHONPATH", "-x", "OMP_NUM_THREADS",
            sys.executable, "train.py"]  # fmt: skip
    done = finish_all([_start(env, tmp_path, argv)], timeout=120)
    assert done[0].returncode == 0, explain(done)
    assert _results(done) == [
        ["Open MPI (mpirun)", 0, 2, 0, 3.0, "0", "127.0.0.1"],
        ["Open MPI (mpirun)", 1, 2, 1, 3.0, "1", "127.0.0.1"],
    ]


def test_srun_variables_on_two_processes_form_a_world_of_two(tmp_path):
    """What `srun -n 2 python train.py` gives each task on one node (the node list names this host)."""
    (tmp_path / "train.py").write_text(SCRIPT)
    host = socket.gethostname()
    job = next(
        str(j) for j in range(os.getpid() * 100, os.getpid() * 100 + 100) if port_is_free(slurm_port(j))
    )
    procs = []
    for task in (0, 1):
        step = dict(
            SLURM_JOB_ID=job, SLURM_STEP_ID="0", SLURM_PROCID=str(task), SLURM_LOCALID=str(task), SLURM_NODEID="0",
            SLURM_NTASKS="2", SLURM_STEP_NUM_TASKS="2", SLURM_STEP_TASKS_PER_NODE="2", SLURM_STEP_NODELIST=host,
            SLURM_NNODES="1", OMP_NUM_THREADS="1",
        )  # fmt: skip
        procs.append(_start(clean_env(tmp_path, **step), tmp_path))
    done = finish_all(procs, timeout=120)
    assert all(r.returncode == 0 for r in done), explain(done)
    assert _results(done) == [
        ["SLURM (srun)", 0, 2, 0, 3.0, "0", host],
        ["SLURM (srun)", 1, 2, 1, 3.0, "1", host],
    ]


def test_pytorchjob_variables_on_two_processes_form_a_world_of_two(tmp_path):
    """Two pods of a PyTorchJob (Master + 1 Worker), here as two processes on this host."""
    (tmp_path / "train.py").write_text(SCRIPT)
    port = str(free_port())
    procs = []
    for rank in (1, 0):  # the worker pod often starts before the master
        pod = dict(
            MASTER_ADDR="127.0.0.1", MASTER_PORT=port, WORLD_SIZE="2", RANK=str(rank), PET_NPROC_PER_NODE="1",
            PET_NODE_RANK=str(rank), PET_NNODES="2", OMP_NUM_THREADS="1",
        )  # fmt: skip
        procs.append(_start(clean_env(tmp_path, **pod), tmp_path))
    done = finish_all(procs, timeout=120)
    assert all(r.returncode == 0 for r in done), explain(done)
    assert _results(done) == [
        ["Kubernetes (PyTorchJob)", 0, 2, 0, 3.0, "0", "127.0.0.1"],
        ["Kubernetes (PyTorchJob)", 1, 2, 0, 3.0, "1", "127.0.0.1"],
    ]
    assert os.environ.get("PET_NNODES") is None  # the test set them for its children only
