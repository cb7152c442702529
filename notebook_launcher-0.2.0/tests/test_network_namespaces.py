"""Several machines over a real network: two network namespaces joined by a veth pair (tests/netns.py),
where the hostname resolves to 127.0.0.1 as in most containers. Without the interface choice,
gloo advertises 127.0.0.1 and the world never forms ("Gloo connectFullMesh failed ...
remote=[127.0.0.1]"); with it, every path below forms one world and all-reduces correctly.

Each "machine" is a separate program started inside its namespace, as on two hosts.
"""

from __future__ import annotations

import json
import re
import sys
import time

import pytest
from netns import accelerator_all_reduce_script, clean_env, explain, finish_all, start_in, two_hosts

pytestmark = pytest.mark.slow

NOTEBOOK_NODE = """
import json, os, sys
import torch
import torch.distributed as dist
from notebook_launcher import Accelerator, notebook_launch

def all_reduce():
    acc = Accelerator()
    t = torch.tensor([float(acc.process_index + 1)])
    dist.all_reduce(t)
    return acc.num_processes, acc.process_index, float(t), os.environ.get("GLOO_SOCKET_IFNAME")

if __name__ == "__main__":
    node_rank, port, addr = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    result = notebook_launch(all_reduce, num_processes=2, num_nodes=2, node_rank=node_rank,
                             master_addr=addr, master_port=port, timeout=150)
    print("RESULT " + json.dumps(list(result)))
    print("CALLER_IFNAME " + json.dumps(os.environ.get("GLOO_SOCKET_IFNAME")))
"""

PROBE = """
import json, os, sys
import torch, torch.distributed as dist
dist.init_process_group("gloo")
value = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(value)
print("RESULT " + json.dumps([dist.get_rank(), dist.get_world_size(), value.item(), os.environ.get("GLOO_SOCKET_IFNAME")]))
dist.destroy_process_group()
"""

CLI_LAUNCH = [sys.executable, "-m", "notebook_launcher", "launch"]
ACCELERATOR_SCRIPT = accelerator_all_reduce_script('os.environ.get("GLOO_SOCKET_IFNAME")')


@pytest.fixture(scope="module")
def hosts():
    with two_hosts() as pair:
        yield pair


def _results(done) -> list:
    """Every RESULT line of every process, in order (the CLI puts the rank in front: `[rank1] RESULT`)."""
    lines = [re.sub(r"^\[rank\d+\] ", "", line) for r in done for line in r.stdout.splitlines()]
    return [json.loads(line[7:]) for line in lines if line.startswith("RESULT ")]


def test_notebook_launch_forms_one_world_across_two_hosts(hosts, tmp_path):
    """World of 4 (2 processes per machine); machine 1 starts first and waits for machine 0."""
    script = tmp_path / "node.py"
    script.write_text(NOTEBOOK_NODE)
    env = clean_env(tmp_path)
    second = start_in(hosts[1], [sys.executable, str(script), "1", "29511", hosts[0].address], env, tmp_path)
    time.sleep(1.0)
    first = start_in(hosts[0], [sys.executable, str(script), "0", "29511", hosts[0].address], env, tmp_path)
    done = finish_all([first, second], timeout=200)
    assert all(r.returncode == 0 for r in done), explain(done)
    main, other = _results(done)
    assert main == [[4, 0, 10.0, hosts[0].interface], [4, 1, 10.0, hosts[0].interface]]
    assert other == [[4, 2, 10.0, hosts[1].interface], [4, 3, 10.0, hosts[1].interface]]
    # One line says which interface; the caller's own environment is left without it.
    assert (
        f"network interface {hosts[0].interface} ({hosts[0].address}) holds the main address"
        in done[0].stdout
    )
    assert (
        f"network interface {hosts[1].interface} ({hosts[1].address}) routes to the main address"
        in done[1].stdout
    )
    assert all("CALLER_IFNAME null" in r.stdout for r in done)


def test_cli_launch_forms_one_world_across_two_hosts(hosts, tmp_path):
    (tmp_path / "probe.py").write_text(PROBE)
    env = clean_env(tmp_path)
    procs = [
        start_in(
            host,
            [
                *CLI_LAUNCH,
                "--num_machines",
                "2",
                "--machine_rank",
                str(rank),
                "--main_process_ip",
                hosts[0].address,
                "--main_process_port",
                "29512",
                "--num_processes",
                "2",
                "--cpu",
                "probe.py",
            ],
            env,
            tmp_path,
        )  # fmt: skip
        for rank, host in ((1, hosts[1]), (0, hosts[0]))
    ]
    done = finish_all(procs, timeout=150)
    assert all(r.returncode == 0 for r in done), explain(done)
    assert sorted(_results(done)) == [[0, 2, 3.0, hosts[0].interface], [1, 2, 3.0, hosts[1].interface]]
    assert f"workers use GLOO_SOCKET_IFNAME={hosts[1].interface}" in done[0].stderr


UNREACHABLE_NODE = """
import sys, time
from notebook_launcher import notebook_launch
from notebook_launcher.errors import NetworkError
started = time.monotonic()
try:
    notebook_launch(print, num_processes=1, num_nodes=2, node_rank=1, master_addr=sys.argv[1],
                    master_port=29513, timeout=600)
except NetworkError as exc:
    print(f"NETWORK_ERROR after {time.monotonic() - started:.1f}s: {exc}")
"""


@pytest.mark.parametrize("address", ["10.77.0.99", "10.99.0.1"], ids=["silent-host", "no-route"])
def test_an_unreachable_main_address_fails_within_seconds(hosts, tmp_path, address):
    """No host answers at .99 on the subnet (ARP fails), and 10.99.0.0/16 has no route at all. Without
    the probe both would sit in the rendezvous until the launch timeout (600 s here); the bound
    below is far under that and far over the ~10 s the probe allows, so a loaded machine passes."""
    (tmp_path / "node.py").write_text(UNREACHABLE_NODE)
    (tmp_path / "probe.py").write_text(PROBE)
    env = clean_env(tmp_path)
    notebook = start_in(hosts[1], [sys.executable, str(tmp_path / "node.py"), address], env, tmp_path)
    cli = start_in(
        hosts[1],
        [sys.executable, "-m", "notebook_launcher", "launch", "--num_machines", "2", "--machine_rank", "1",
         "--main_process_ip", address, "--main_process_port", "29514", "--cpu", "probe.py"],
        env,
        tmp_path,
    )  # fmt: skip
    started = time.monotonic()
    done = finish_all([notebook, cli], timeout=120)
    assert time.monotonic() - started < 120
    assert "NETWORK_ERROR" in done[0].stdout, explain(done)
    assert f"Cannot reach the main machine at {address}:29513" in done[0].stdout
    assert done[1].returncode == 1, explain(done)
    assert f"Cannot reach the main machine at {address}:29514" in done[1].stderr


def _slurm_step(host, node_id: int, job: str = "4242") -> dict[str, str]:
    """What srun sets for one task per node on two nodes (only the variables we read, plus noise)."""
    return {
        "SLURM_JOB_ID": job,
        "SLURM_JOBID": job,
        "SLURM_STEP_ID": "0",
        "SLURM_PROCID": str(node_id),
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": str(node_id),
        "SLURM_NTASKS": "2",
        "SLURM_NNODES": "2",
        "SLURM_STEP_NUM_TASKS": "2",
        "SLURM_STEP_NUM_NODES": "2",
        "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
        "SLURM_STEP_NODELIST": "10.77.0.[1-2]",
        "SLURM_JOB_NODELIST": "10.77.0.[1-2]",
        "SLURMD_NODENAME": host.namespace,
    }


def test_a_script_under_srun_forms_one_world_across_two_hosts(hosts, tmp_path):
    """`srun -N 2 python train.py`: each task's Accelerator finds the other through the first node."""
    (tmp_path / "train.py").write_text(ACCELERATOR_SCRIPT)
    procs = [
        start_in(host, [sys.executable, "train.py"], clean_env(tmp_path, **_slurm_step(host, i)), tmp_path)
        for i, host in enumerate(hosts)
    ]
    done = finish_all(procs, timeout=120)
    assert all(r.returncode == 0 for r in done), explain(done)
    assert _results(done) == [
        ["SLURM (srun)", 0, 2, 0, 3.0, hosts[0].interface],
        ["SLURM (srun)", 1, 2, 0, 3.0, hosts[1].interface],
    ]


def test_the_cli_inside_sbatch_takes_its_machines_from_slurm(hosts, tmp_path):
    """`srun --ntasks-per-node=1 notebook-launcher launch --num_processes 4 probe.py` in a 2-node job."""
    (tmp_path / "probe.py").write_text(PROBE)
    procs = [
        start_in(
            host,
            [
                *CLI_LAUNCH,
                "--num_processes",
                "4",
                "--cpu",
                "probe.py",
            ],
            clean_env(tmp_path, **_slurm_step(host, i, job="777")),
            tmp_path,
        )
        for i, host in enumerate(hosts)
    ]
    done = finish_all(procs, timeout=150)
    assert all(r.returncode == 0 for r in done), explain(done)
    ranks = sorted(_results(done))
    assert [r[:3] for r in ranks] == [[0, 4, 10.0], [1, 4, 10.0], [2, 4, 10.0], [3, 4, 10.0]]
    assert "SLURM job 777: machine 1 of 2, main machine 10.77.0.1:" in done[1].stderr
    assert "(from SLURM_NNODES, SLURM_NODEID, SLURM_STEP_NODELIST, SLURM_JOB_ID)" in done[1].stderr


def test_a_pytorchjob_forms_one_world_across_two_hosts(hosts, tmp_path):
    """Kubeflow's training operator: one process per pod, RANK = pod index, PET_* alongside."""
    (tmp_path / "train.py").write_text(ACCELERATOR_SCRIPT)
    procs = []
    for rank, host in enumerate(hosts):
        pod = {
            "MASTER_ADDR": hosts[0].address,
            "MASTER_PORT": "29515",
            "WORLD_SIZE": "2",
            "RANK": str(rank),
            "PET_NPROC_PER_NODE": "1",
            "PET_NODE_RANK": str(rank),
            "PET_NNODES": "2",
            "KUBERNETES_SERVICE_HOST": "10.96.0.1",
        }
        procs.append(start_in(host, [sys.executable, "train.py"], clean_env(tmp_path, **pod), tmp_path))
    done = finish_all(procs, timeout=120)
    assert all(r.returncode == 0 for r in done), explain(done)
    assert _results(done) == [
        ["Kubernetes (PyTorchJob)", 0, 2, 0, 3.0, hosts[0].interface],
        ["Kubernetes (PyTorchJob)", 1, 2, 0, 3.0, hosts[1].interface],
    ]
