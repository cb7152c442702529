"""The machines of a launch from its environment: a SLURM step's nodes, node id and first node
fill the machine keys nobody chose (the "environment" layer of resolution/resolve.py)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..config import LaunchConfig
from ..errors import ConfigError
from ..system.schedulers import batch_job, slurm_step

MACHINE_KEYS = ("num_machines", "machine_rank", "main_process_ip", "main_process_port")


def machines_from_slurm(
    config: LaunchConfig, chosen: set[str], environ: Mapping[str, str] | None = None
) -> tuple[LaunchConfig, str | None]:
    """Fill the machine keys nobody chose from SLURM, and say so in one line.

    Under `srun` (one launcher per node): machines = the step's nodes, machine rank = SLURM_NODEID,
    main address = the step's first node, port derived from the job id. In an `sbatch` batch
    script of several nodes (which runs on the first node only) the launch would wait forever
    for machines that never start: that is an error with the fix.
    """
    environ = os.environ if environ is None else environ
    step = slurm_step(environ)
    if step is None:
        job = batch_job(environ)
        if job and job[1] > 1 and "num_machines" not in chosen:
            raise ConfigError(
                f"notebook-launcher launch runs in the batch script of SLURM job {job[0]}, which has {job[1]} nodes, "
                "but a batch script runs on the first node only. Start one launcher per node: "
                "`srun --ntasks-per-node=1 notebook-launcher launch ...` (or pass --num_machines 1 to use this node only)."
            )
        return config, None
    derived = {
        "num_machines": step.num_nodes,
        "machine_rank": step.node_id,
        "main_process_ip": step.nodes[0],
        "main_process_port": step.port,
    }
    missing = {key: value for key, value in derived.items() if key not in chosen}
    if step.num_nodes == 1 or not missing:
        return config, None
    if max(step.tasks_per_node) > 1:
        raise ConfigError(
            f"notebook-launcher launch runs as {step.local_tasks} srun tasks on this node (SLURM job {step.job_id}); "
            "each launcher starts its machine's processes itself, so run one per node: "
            "`srun --ntasks-per-node=1 notebook-launcher launch ...`."
        )
    config = config.replace(**missing)
    sources = {
        "num_machines": "SLURM_NNODES",
        "machine_rank": "SLURM_NODEID",
        "main_process_ip": step.nodes_variable,
        "main_process_port": "SLURM_JOB_ID",
    }
    return config, (
        f"SLURM job {step.job_id}: machine {config.machine_rank} of {config.num_machines}, main machine "
        f"{config.main_process_ip}:{config.main_process_port} (from {', '.join(sources[key] for key in missing)})."
    )
