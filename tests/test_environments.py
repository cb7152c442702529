"""Which world a process is in, read from torchrun / SLURM / MPI / Kubeflow variables (pure: no
processes here; real worlds in test_environments_worlds.py and test_network_namespaces.py)."""

from __future__ import annotations

import pytest

from notebook_launcher import LaunchConfig
from notebook_launcher.errors import ClusterEnvironmentError, ConfigError
from notebook_launcher.resolution.machines import machines_from_slurm
from notebook_launcher.runtime.world.environments import World, detect_world
from notebook_launcher.system.schedulers import (
    PORT_BASE,
    PORT_SPAN,
    derived_port,
    expand_hostlist,
    expand_tasks_per_node,
    slurm_step,
)

HOSTLISTS = [
    ("node01", ["node01"]),
    ("node[01-04,07],gpu-a", ["node01", "node02", "node03", "node04", "node07", "gpu-a"]),
    ("tux[8-11]", ["tux8", "tux9", "tux10", "tux11"]),
    ("n[098-101]", ["n098", "n099", "n100", "n101"]),
    ("rack[1-2]-node[1-2]", ["rack1-node1", "rack1-node2", "rack2-node1", "rack2-node2"]),
    ("a[1,3]b,c", ["a1b", "a3b", "c"]),
    ("10.77.0.[1-2]", ["10.77.0.1", "10.77.0.2"]),
    ("gpu-a,gpu-b", ["gpu-a", "gpu-b"]),
]


@pytest.mark.parametrize("text, hosts", HOSTLISTS)
def test_slurm_hostlists_expand(text, hosts):
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize("text", ["node[1-2", "node]1[", "node[a-b]", "node[3-1]", "a,,b", "", "n[[1]]"])
def test_malformed_hostlists_are_named(text):
    with pytest.raises(ValueError, match="host list|range"):
        expand_hostlist(text)


@pytest.mark.parametrize(
    "text, counts", [("2(x3),1", [2, 2, 2, 1]), ("4", [4]), ("1(x2)", [1, 1]), ("3,2(x2)", [3, 2, 2])]
)
def test_slurm_task_counts_expand(text, counts):
    assert expand_tasks_per_node(text) == counts


def test_the_derived_port_is_shared_by_a_job_and_stays_below_the_ephemeral_range():
    ports = {derived_port(f"slurm:{job}.0") for job in range(1000, 1100)}
    assert all(PORT_BASE <= p < PORT_BASE + PORT_SPAN < 32768 for p in ports)
    assert len(ports) > 90  # consecutive jobs on one node rarely share a port
    assert derived_port("slurm:1234.0") == derived_port("slurm:1234.0")


# ------------------------------------------------------------------ the worlds


def srun(proc: int, ntasks: int = 4, nodes: str = "node[1-2]", per_node: str = "2(x2)", **extra) -> dict:
    env = {
        "SLURM_JOB_ID": "1234",
        "SLURM_STEP_ID": "0",
        "SLURM_PROCID": str(proc),
        "SLURM_NTASKS": str(ntasks),
        "SLURM_LOCALID": str(proc % 2),
        "SLURM_NODEID": str(proc // 2),
        "SLURM_STEP_NODELIST": nodes,
        "SLURM_STEP_TASKS_PER_NODE": per_node,
    }
    env.update(extra)
    return {k: v for k, v in env.items() if v is not None}


def ompi(rank: int, size: int = 2, local: int | None = None, local_size: int | None = None, **extra) -> dict:
    env = {
        "OMPI_COMM_WORLD_RANK": str(rank),
        "OMPI_COMM_WORLD_SIZE": str(size),
        "OMPI_COMM_WORLD_LOCAL_RANK": str(rank if local is None else local),
        "OMPI_COMM_WORLD_LOCAL_SIZE": str(size if local_size is None else local_size),
        "OMPI_MCA_ess_base_jobid": "95617025",
    }
    env.update(extra)
    return env


def test_nothing_set_is_one_process():
    assert detect_world({}) == World(0, 1, 0, 1, 0, None, None, "single process")


def test_torchrun_variables_come_first():
    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
           "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "x", **srun(0), **ompi(0)}  # fmt: skip
    assert detect_world(env) == World(3, 4, 1, 2, 1, "10.0.0.1", 29500, "torchrun")


def test_hand_set_torch_variables_keep_todays_meaning():
    env = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1234"}
    assert detect_world(env) == World(1, 2, 1, 2, 0, "127.0.0.1", 1234, "torch variables")


def test_srun_tasks_form_the_slurm_world():
    world = detect_world(srun(3))
    assert (world.rank, world.world_size, world.local_rank, world.local_world_size, world.node_rank) == (
        3,
        4,
        1,
        2,
        1,
    )
    assert (world.master_addr, world.peer_host, world.source) == ("node1", "node2", "SLURM (srun)")
    assert world.master_port == derived_port("slurm:1234.0") == detect_world(srun(0)).master_port


def test_srun_respects_master_addr_and_port_from_the_batch_script():
    world = detect_world(srun(1, MASTER_ADDR="10.1.1.1", MASTER_PORT="23456"))
    assert (world.master_addr, world.master_port) == ("10.1.1.1", 23456)


def test_uneven_tasks_per_node():
    env = srun(4, ntasks=5, nodes="a,b", per_node="4,1", SLURM_LOCALID="0", SLURM_NODEID="1")
    world = detect_world(env)
    assert (world.rank, world.local_rank, world.local_world_size, world.node_rank) == (4, 0, 1, 1)


def test_an_sbatch_script_is_one_process_and_says_how_to_use_srun():
    batch = {"SLURM_JOB_ID": "99", "SLURM_NTASKS": "4", "SLURM_PROCID": "0", "SLURM_NODEID": "0",
             "SLURM_LOCALID": "0", "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_NNODES": "2"}  # fmt: skip
    world = detect_world(batch)
    assert (world.world_size, world.source) == (1, "single process")
    assert "SLURM job 99 has 4 tasks, but this script was not started by srun" in world.note
    assert detect_world({**batch, "SLURM_STEP_ID": "4294967294"}).world_size == 1  # the batch step's id
    assert detect_world({**batch, "SLURM_NTASKS": "1"}).note is None


def test_open_mpi_on_one_host():
    world = detect_world(ompi(1))
    assert world == World(1, 2, 1, 2, 0, "127.0.0.1", derived_port("mpi:95617025"), "Open MPI (mpirun)")


def test_mpich_and_mvapich_variables():
    pmi = {
        "PMI_RANK": "2",
        "PMI_SIZE": "4",
        "MPI_LOCALRANKID": "0",
        "MPI_LOCALNRANKS": "2",
        "MASTER_ADDR": "h1",
    }
    world = detect_world(pmi)
    assert (world.rank, world.local_world_size, world.node_rank, world.master_addr) == (2, 2, 1, "h1")
    assert world.source == "MPICH / Intel MPI (mpirun)" and world.master_port == 29500
    mv2 = {"MV2_COMM_WORLD_RANK": "0", "MV2_COMM_WORLD_SIZE": "2", "MV2_COMM_WORLD_LOCAL_RANK": "0",
           "MV2_COMM_WORLD_LOCAL_SIZE": "2", "MASTER_PORT": "4000"}  # fmt: skip
    assert detect_world(mv2) == World(0, 2, 0, 2, 0, "127.0.0.1", 4000, "MVAPICH (mpirun)")


def test_mpirun_inside_a_slurm_job_is_an_mpi_world():
    """Open MPI starts its daemons with srun: ranks see the daemons' step (one task per node)."""
    daemons = srun(0, ntasks=1, nodes="node1", per_node="1", SLURM_LOCALID="0", SLURM_NODEID="0")
    world = detect_world({**daemons, **ompi(1)})
    assert (world.rank, world.world_size, world.source) == (1, 2, "Open MPI (mpirun)")
    agreeing = {**srun(1, ntasks=2, nodes="n1", per_node="2"), "PMI_RANK": "1", "PMI_SIZE": "2"}
    assert detect_world(agreeing).source == "SLURM (srun)"  # srun --mpi=pmi2: both say the same


def test_a_pytorchjob_pod_is_one_process_per_pod():
    pod = {"MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456", "WORLD_SIZE": "3", "RANK": "2",
           "PET_NPROC_PER_NODE": "1", "PET_NODE_RANK": "2", "PET_NNODES": "3"}  # fmt: skip
    assert detect_world(pod) == World(2, 3, 0, 1, 2, "job-master-0", 23456, "Kubernetes (PyTorchJob)")
    old_operator = {"MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456", "WORLD_SIZE": "3", "RANK": "1",
                    "KUBERNETES_SERVICE_HOST": "10.96.0.1"}  # fmt: skip
    assert detect_world(old_operator).local_world_size == 1
    notebook_pod = {**old_operator, "MASTER_ADDR": "localhost"}  # mp.spawn by hand in a JupyterHub pod
    assert detect_world(notebook_pod).source == "torch variables"


BAD = [
    ({"RANK": "0"}, "RANK=0 is set but WORLD_SIZE is not"),
    ({"WORLD_SIZE": "2"}, "WORLD_SIZE=2 is set but RANK is not"),
    ({"RANK": "2", "WORLD_SIZE": "2"}, r"rank 2 is not in 0\.\.1"),
    ({"RANK": "x", "WORLD_SIZE": "2"}, "RANK='x' must be an integer"),
    (
        {"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "2"},
        r"local rank 3 is not in 0\.\.1",
    ),
    (srun(0, SLURM_PROCID=None), "SLURM_PROCID is not set"),
    (srun(0, SLURM_LOCALID=None), "SLURM_LOCALID is not set"),
    (srun(5), "SLURM_PROCID=5 is not below SLURM_NTASKS=4"),
    (srun(0, per_node="2,1"), "add up to 3, not SLURM_NTASKS=4"),
    (srun(0, per_node="4(x3)"), "list 3 nodes but SLURM_STEP_NODELIST lists 2"),
    (srun(0, nodes="node[1-2"), r"SLURM_STEP_NODELIST='node\[1-2' cannot be read"),
    (
        srun(0, SLURM_STEP_NODELIST=None),
        "none of SLURM_STEP_NODELIST, SLURM_NODELIST, SLURM_JOB_NODELIST is set",
    ),
    ({"OMPI_COMM_WORLD_RANK": "0"}, "OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not"),
    ({**ompi(0), "PMI_RANK": "1", "PMI_SIZE": "2"}, "MPI variables contradict each other"),
    (ompi(0, size=4, local=0, local_size=2), "Set MASTER_ADDR to the first host"),
    ({"PMI_RANK": "0", "PMI_SIZE": "2"}, "MPI_LOCALRANKID / MPI_LOCALNRANKS are not"),
    (
        {"RANK": "1", "WORLD_SIZE": "8", "MASTER_ADDR": "m", "PET_NPROC_PER_NODE": "4"},
        "was started without torchrun",
    ),
    (
        {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "m", "PET_NNODES": "3"},
        "WORLD_SIZE=2 but PET_NNODES=3",
    ),
    (
        {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "m", "PET_NODE_RANK": "0"},
        "RANK=1 but PET_NODE_RANK=0",
    ),
    ({"RANK": "1", "WORLD_SIZE": "2", "PET_NNODES": "2"}, "no MASTER_ADDR"),
    ({"PET_NNODES": "1:3", "PET_RDZV_ENDPOINT": "h:29400"}, "not started by torchrun"),
]


@pytest.mark.parametrize("env, message", BAD, ids=[m[:40] for _, m in BAD])
def test_partial_or_conflicting_environments_are_errors_that_name_the_variables(env, message):
    with pytest.raises(ClusterEnvironmentError, match=message):
        detect_world(env)


def test_the_accelerator_refuses_a_partial_environment(monkeypatch):
    from notebook_launcher import Accelerator
    from notebook_launcher.runtime.world.state import reset_state

    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    reset_state()
    with pytest.raises(ClusterEnvironmentError, match="WORLD_SIZE=2 is set but RANK is not"):
        Accelerator(cpu=True)
    reset_state()


# ------------------------------------------------------------------ the CLI inside sbatch


def test_the_cli_takes_unchosen_machine_keys_from_srun():
    env = srun(2, ntasks=2, nodes="gpu[07-08]", per_node="1(x2)", SLURM_PROCID="1", SLURM_LOCALID="0",
               SLURM_NODEID="1")  # fmt: skip
    config, note = machines_from_slurm(LaunchConfig(), set(), env)
    port = slurm_step(env).port
    assert (config.num_machines, config.machine_rank, config.main_process_ip) == (2, 1, "gpu07")
    assert config.main_process_port == port
    assert note == (
        f"SLURM job 1234: machine 1 of 2, main machine gpu07:{port} "
        "(from SLURM_NNODES, SLURM_NODEID, SLURM_STEP_NODELIST, SLURM_JOB_ID)."
    )
    chosen, note = machines_from_slurm(LaunchConfig(main_process_port=29600), {"main_process_port"}, env)
    assert (
        chosen.main_process_port == 29600 and "from SLURM_NNODES, SLURM_NODEID, SLURM_STEP_NODELIST)" in note
    )


def test_the_cli_in_a_multi_node_batch_script_says_to_use_srun():
    batch = {"SLURM_JOB_ID": "5", "SLURM_NNODES": "2", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "n[1-2]"}
    with pytest.raises(ConfigError, match="srun --ntasks-per-node=1 notebook-launcher launch"):
        machines_from_slurm(LaunchConfig(), set(), batch)
    assert machines_from_slurm(LaunchConfig(), {"num_machines"}, batch)[1] is None  # --num_machines 1 given
    assert machines_from_slurm(LaunchConfig(), set(), {**batch, "SLURM_NNODES": "1"}) == (
        LaunchConfig(),
        None,
    )


def test_the_cli_under_srun_with_several_tasks_per_node_says_one_per_node():
    with pytest.raises(ConfigError, match="runs as 2 srun tasks on this node"):
        machines_from_slurm(LaunchConfig(), set(), srun(1))


def test_the_cli_outside_slurm_is_untouched():
    assert machines_from_slurm(LaunchConfig(), set(), {}) == (LaunchConfig(), None)
