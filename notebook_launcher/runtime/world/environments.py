"""Which world this process belongs to, read from the environment it was started in — like
Lightning's cluster environments, in one place.

In order (the innermost launcher wins):
  1. torch's variables, RANK and WORLD_SIZE — set by torchrun, `notebook-launcher launch`,
     notebook_launch, and by Kubeflow's PyTorchJob (one process per pod, told apart by its PET_*
     variables or by a Kubernetes pod whose MASTER_ADDR is another host);
  2. SLURM, only in a task that `srun` started (SLURM_STEP_ID set): the batch script of an `sbatch`
     job also carries SLURM_NTASKS and SLURM_PROCID=0, but it is one process, not a world;
  3. MPI under mpirun: Open MPI (OMPI_COMM_WORLD_*), MVAPICH (MV2_COMM_WORLD_*), MPICH / Intel MPI
     (PMI_RANK, PMI_SIZE, MPI_LOCALRANKID). Under Open MPI inside a SLURM job, mpirun starts its
     daemons with srun, so ranks also see the daemons' step variables; when the two disagree, MPI's
     describe this process.
Nothing found: one process. Partial or contradicting variables are a ClusterEnvironmentError that
names them — never a silent world of one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from ...errors import ClusterEnvironmentError
from ...records.names import DEFAULT_PORT, LOOPBACK
from ...system.schedulers import batch_job, derived_port, slurm_step

KUBEFLOW_VARIABLES = ("PET_NPROC_PER_NODE", "PET_NNODES", "PET_NODE_RANK")
ELASTIC_VARIABLES = (*KUBEFLOW_VARIABLES, "PET_RDZV_ENDPOINT", "PET_RDZV_BACKEND", "PET_MASTER_ADDR")
MPI_FLAVOURS = (  # (name, rank, size, local rank, local size)
    ("Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("MVAPICH", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_SIZE"),
    ("MPICH / Intel MPI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
)  # fmt: skip
MPI_JOB_IDS = ("OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "PMI_KVSNAME")


@dataclass(frozen=True)
class World:
    """This process's place in the run: what ProcessState is built from and init_process_group needs."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    master_addr: str | None
    master_port: int | None
    source: str  # "torchrun", "torch variables", "SLURM (srun)", "Open MPI (mpirun)", ...
    peer_host: str | None = None  # another machine of the world (to find this one's interface)
    note: str | None = None  # one line worth telling the user (e.g. a batch script without srun)

    @property
    def spans_machines(self) -> bool:
        return self.local_world_size < self.world_size

    def torch_env(self) -> dict[str, str]:
        """torch's variables for this world, as torchrun would have set them."""
        env = {
            "RANK": str(self.rank),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_RANK": str(self.local_rank),
            "LOCAL_WORLD_SIZE": str(self.local_world_size),
            "GROUP_RANK": str(self.node_rank),
        }
        if self.master_addr is not None:
            env["MASTER_ADDR"] = self.master_addr
        if self.master_port is not None:
            env["MASTER_PORT"] = str(self.master_port)
        return env


def detect_world(environ: Mapping[str, str] | None = None) -> World:
    """The world described by `environ` (default: this process's), by the precedence above."""
    environ = os.environ if environ is None else environ
    for reader in (_torch_world, _elastic_without_torchrun, _slurm_world, _mpi_world):
        world = reader(environ)
        if world is not None:
            return _checked(world)
    return World(0, 1, 0, 1, 0, None, None, "single process", note=_batch_note(environ))


# ------------------------------------------------------------------ readers


def _int(environ: Mapping[str, str], name: str, default: int | None = None) -> int:
    raw = environ.get(name, "")
    if raw == "":
        if default is None:
            raise ClusterEnvironmentError(f"{name} is not set.")
        return default
    try:
        return int(raw)
    except ValueError:
        raise ClusterEnvironmentError(f"Environment variable {name}={raw!r} must be an integer.") from None


def _port(environ: Mapping[str, str], default: int) -> int:
    return _int(environ, "MASTER_PORT", default)


def _torch_world(environ: Mapping[str, str]) -> World | None:
    has_rank, has_size = environ.get("RANK", "") != "", environ.get("WORLD_SIZE", "") != ""
    if not (has_rank or has_size):
        return None
    if has_rank != has_size:
        present, missing = ("RANK", "WORLD_SIZE") if has_rank else ("WORLD_SIZE", "RANK")
        raise ClusterEnvironmentError(
            f"{present}={environ[present]} is set but {missing} is not: torch's variables come together "
            f"(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Set {missing} too, or unset {present} to run as one process."
        )
    rank, world = _int(environ, "RANK"), _int(environ, "WORLD_SIZE")
    addr = environ.get("MASTER_ADDR") or None
    port = _int(environ, "MASTER_PORT", 0) or None
    if environ.get("LOCAL_RANK", "") == "" and _is_kubeflow_pod(environ):
        return _kubeflow_world(environ, rank, world, addr, port)
    source = "torchrun" if environ.get("TORCHELASTIC_RUN_ID") else "torch variables"
    local_rank = _int(environ, "LOCAL_RANK", rank)
    local_world = _int(environ, "LOCAL_WORLD_SIZE", world)
    node_rank = _int(environ, "GROUP_RANK", _int(environ, "NODE_RANK", 0))
    return World(rank, world, local_rank, local_world, node_rank, addr, port, source)


def _is_kubeflow_pod(environ: Mapping[str, str]) -> bool:
    """PyTorchJob pods: PET_* variables (training-operator >= 1.7), or a pod pointed at another host."""
    if any(environ.get(name) for name in KUBEFLOW_VARIABLES):
        return True
    master = environ.get("MASTER_ADDR", "")
    return bool(environ.get("KUBERNETES_SERVICE_HOST")) and master not in ("", "localhost", LOOPBACK, "::1")


def _kubeflow_world(
    environ: Mapping[str, str], rank: int, world: int, addr: str | None, port: int | None
) -> World:
    per_pod = environ.get("PET_NPROC_PER_NODE", "1")
    nodes = environ.get("PET_NNODES", "")
    if per_pod not in ("1", "auto") or ":" in nodes:
        raise ClusterEnvironmentError(
            f"This pod of a PyTorchJob (PET_NPROC_PER_NODE={per_pod!r}, PET_NNODES={nodes!r}) was started without "
            "torchrun, but the job expects torchrun to start its processes (RANK here is the pod's index, not a "
            "process rank). Use `torchrun script.py` or `notebook-launcher launch script.py` as the container command."
        )
    if nodes and nodes.isdigit() and int(nodes) != world:
        raise ClusterEnvironmentError(
            f"WORLD_SIZE={world} but PET_NNODES={nodes} pods of one process each: the PyTorchJob variables contradict "
            "each other; check the job's replicas and nprocPerNode."
        )
    node_rank = _int(environ, "PET_NODE_RANK", rank)
    if node_rank != rank:
        raise ClusterEnvironmentError(
            f"RANK={rank} but PET_NODE_RANK={node_rank}: with one process per pod they must be equal."
        )
    if addr is None:
        raise ClusterEnvironmentError(
            "This PyTorchJob pod has RANK and WORLD_SIZE but no MASTER_ADDR; the job needs a Master replica "
            "(the training operator then sets MASTER_ADDR and MASTER_PORT)."
        )
    return World(rank, world, 0, 1, rank, addr, port or DEFAULT_PORT, "Kubernetes (PyTorchJob)")


def _elastic_without_torchrun(environ: Mapping[str, str]) -> World | None:
    found = [f"{name}={environ[name]}" for name in ELASTIC_VARIABLES if environ.get(name)]
    if found:
        raise ClusterEnvironmentError(
            f"{', '.join(found)} are set — an elastic PyTorchJob, whose variables are read by torchrun — but this "
            "process was not started by torchrun (no RANK, WORLD_SIZE). Use `torchrun script.py` or "
            "`notebook-launcher launch script.py` as the container command."
        )
    return None


def _slurm_world(environ: Mapping[str, str]) -> World | None:
    step = slurm_step(environ)
    if step is None:
        return None
    mpi = _mpi_ranks(environ)
    if mpi and mpi[0][1:] != (step.proc_id, step.num_tasks):
        return _mpi_world(environ)  # mpirun inside a SLURM job: the step variables are its daemons'
    addr = environ.get("MASTER_ADDR") or step.nodes[0]
    peer = next((host for host in step.nodes if host != step.nodes[0]), None)
    return World(
        step.proc_id,
        step.num_tasks,
        step.local_id,
        step.local_tasks,
        step.node_id,
        addr,
        _port(environ, step.port),
        "SLURM (srun)",
        peer_host=peer,
    )


def _mpi_ranks(environ: Mapping[str, str]) -> list[tuple[tuple[str, ...], int, int]]:
    """(flavour, rank, size) of every MPI whose variables are set; partial or contradicting ones raise."""
    found: list[tuple[tuple[str, ...], int, int]] = []
    for flavour in MPI_FLAVOURS:
        name, rank_var, size_var = flavour[:3]
        has_rank, has_size = bool(environ.get(rank_var)), bool(environ.get(size_var))
        if not (has_rank or has_size):
            continue
        if has_rank != has_size:
            present, missing = (rank_var, size_var) if has_rank else (size_var, rank_var)
            raise ClusterEnvironmentError(
                f"{present} is set but {missing} is not: the {name} variables are partial. Start the script with "
                "mpirun (or mpiexec) directly."
            )
        found.append((flavour, _int(environ, rank_var), _int(environ, size_var)))
    if len({(rank, size) for _, rank, size in found}) > 1:
        shown = ", ".join(f"{f[1]}={environ[f[1]]}, {f[2]}={environ[f[2]]}" for f, _, _ in found)
        raise ClusterEnvironmentError(f"The MPI variables contradict each other: {shown}.")
    return found


def _mpi_world(environ: Mapping[str, str]) -> World | None:
    found = _mpi_ranks(environ)
    if not found:
        return None
    (name, rank_var, size_var, local_var, local_size_var), rank, world = found[0]
    if not (environ.get(local_var) and environ.get(local_size_var)):
        raise ClusterEnvironmentError(
            f"{rank_var} and {size_var} are set but {local_var} / {local_size_var} are not, so the ranks on this "
            "machine are unknown. Start the script with your MPI's own mpirun."
        )
    local_rank, local_world = _int(environ, local_var), _int(environ, local_size_var)
    addr = environ.get("MASTER_ADDR") or None
    if addr is None and local_world < world:
        raise ClusterEnvironmentError(
            f"mpirun started {world} ranks on several machines ({local_size_var}={local_world}), and MPI does not "
            "say which host is the main one. Set MASTER_ADDR to the first host (and MASTER_PORT to a free port) "
            "for every rank, e.g. `mpirun -x MASTER_ADDR=node01 -x MASTER_PORT=29500 ...` (Open MPI) or "
            "`mpiexec -genv MASTER_ADDR node01 ...` (MPICH / Intel MPI)."
        )
    job = next((environ[key] for key in MPI_JOB_IDS if environ.get(key)), None)
    port = _port(environ, derived_port(f"mpi:{job}") if job else DEFAULT_PORT)
    node_rank = rank // local_world  # mpirun's default mapping fills one machine after another
    return World(rank, world, local_rank, local_world, node_rank, addr or LOOPBACK, port, f"{name} (mpirun)")


def _batch_note(environ: Mapping[str, str]) -> str | None:
    job = batch_job(environ)
    if job is None or job[2] <= 1:
        return None
    return (
        f"SLURM job {job[0]} has {job[2]} tasks, but this script was not started by srun, so it runs as one "
        "process. To train on all of them, start it with `srun python script.py` in the batch script."
    )


def _checked(world: World) -> World:
    problems = []
    if world.world_size < 1:
        problems.append(f"the world size is {world.world_size}")
    if not 0 <= world.rank < world.world_size:
        problems.append(f"rank {world.rank} is not in 0..{world.world_size - 1}")
    if not 1 <= world.local_world_size <= world.world_size:
        problems.append(
            f"{world.local_world_size} processes on this machine in a world of {world.world_size}"
        )
    elif not 0 <= world.local_rank < world.local_world_size:
        problems.append(f"local rank {world.local_rank} is not in 0..{world.local_world_size - 1}")
    if problems:
        variables = ", ".join(
            f"{k}={v}" for k, v in world.torch_env().items() if k not in ("MASTER_ADDR", "MASTER_PORT")
        )
        raise ClusterEnvironmentError(
            f"The {world.source} environment describes no valid world: {'; '.join(problems)} ({variables})."
        )
    return world
