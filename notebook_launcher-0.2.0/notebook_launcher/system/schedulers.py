"""What SLURM tells a process through its environment, read without torch: its hostlist and
task-count syntax, whether this process is an `srun` task or the batch script itself, and a port
derived from the job's id.

Shared by runtime/world/environments.py (the world of a script started by `srun`) and by the CLI
(the machines of `notebook-launcher launch` inside an `sbatch` job), which may not import the
runtime. The batch script matters: `sbatch` alone sets SLURM_NTASKS, SLURM_PROCID=0 and the node
list for the single copy of the script it runs on the first node; only `srun` tasks carry a step
id (SLURM_STEP_ID), so only they are ranks of an SLURM-started world.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import ClusterEnvironmentError

# Step ids at or above this are SLURM's special steps (batch script, extern, interactive, pending):
# a process there was not started by `srun` as one task of a parallel step.
_SPECIAL_STEP_IDS = 0xFFFFFFF0
PORT_BASE = 15000
PORT_SPAN = 17000  # 15000..31999: below Linux's ephemeral range (32768+), where clients take ports


def derived_port(key: str) -> int:
    """A port every task of one job computes alike, and another job most likely does not."""
    return PORT_BASE + zlib.crc32(key.encode()) % PORT_SPAN


def expand_hostlist(text: str) -> list[str]:
    """SLURM's hostlist syntax expanded: "node[01-03,07],gpu-a" -> node01 node02 node03 node07 gpu-a.

    Several bracket groups multiply ("r[1-2]n[1-2]" -> r1n1 r1n2 r2n1 r2n2); a range keeps the
    zero padding of its lower bound, as SLURM writes it.
    """
    hosts: list[str] = []
    for item in _split_outside_brackets(text.strip(), text):
        hosts.extend(_expand_item(item, text))
    if not hosts:
        raise ValueError(f"empty host list {text!r}")
    return hosts


def _split_outside_brackets(text: str, whole: str) -> list[str]:
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
            if depth > 1:
                raise ValueError(f"nested brackets in host list {whole!r}")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in host list {whole!r}")
        elif char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"unbalanced '[' in host list {whole!r}")
    items.append(text[start:])
    if any(not item.strip() for item in items):
        raise ValueError(f"empty host name in host list {whole!r}")
    return [item.strip() for item in items]


def _expand_item(item: str, whole: str) -> list[str]:
    opening = item.find("[")
    if opening < 0:
        return [item]
    closing = item.index("]", opening)
    prefix, ranges, rest = item[:opening], item[opening + 1 : closing], item[closing + 1 :]
    tails = _expand_item(rest, whole)
    return [f"{prefix}{value}{tail}" for value in _expand_ranges(ranges, whole) for tail in tails]


def _expand_ranges(ranges: str, whole: str) -> list[str]:
    values = []
    for part in ranges.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not match:
            raise ValueError(f"bad range {part!r} in host list {whole!r}")
        low, high = match.group(1), match.group(2) or match.group(1)
        if int(high) < int(low):
            raise ValueError(f"range {part!r} runs backwards in host list {whole!r}")
        values += [str(n).zfill(len(low)) for n in range(int(low), int(high) + 1)]
    return values


def expand_tasks_per_node(text: str) -> list[int]:
    """SLURM's task counts per node: "2(x3),1" -> [2, 2, 2, 1]."""
    counts: list[int] = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*(?:\(x(\d+)\))?\s*", part)
        if not match:
            raise ValueError(f"bad task count {part!r} in {text!r}")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


@dataclass(frozen=True)
class SlurmStep:
    """This process as one task of an `srun` step."""

    job_id: str
    step_id: str
    proc_id: int
    num_tasks: int
    local_id: int
    node_id: int
    tasks_per_node: tuple[int, ...]
    nodes: tuple[str, ...]
    nodes_variable: str  # which variable the node list came from (for messages)

    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    @property
    def local_tasks(self) -> int:
        return self.tasks_per_node[self.node_id]

    @property
    def port(self) -> int:
        return derived_port(f"slurm:{self.job_id}.{self.step_id}")


def _first(environ: Mapping[str, str], *names: str) -> tuple[str, str] | None:
    for name in names:
        if environ.get(name, "") != "":
            return name, environ[name]
    return None


def _required_int(environ: Mapping[str, str], *names: str) -> int:
    found = _first(environ, *names)
    if found is None:
        raise ClusterEnvironmentError(
            f"This process runs in an srun step (SLURM_STEP_ID={environ.get('SLURM_STEP_ID', environ.get('SLURM_STEPID'))}) "
            f"but {' / '.join(names)} is not set, so its place in the world is unknown. Start the script with "
            "`srun` directly (not through a wrapper that clears SLURM variables)."
        )
    name, raw = found
    try:
        return int(raw)
    except ValueError:
        raise ClusterEnvironmentError(f"{name}={raw!r} is not an integer; SLURM sets it to one.") from None


def is_srun_task(environ: Mapping[str, str]) -> bool:
    """Started by `srun` as a task of a step (not the batch script, not a bare allocation)."""
    found = _first(environ, "SLURM_STEP_ID", "SLURM_STEPID")
    if found is None or not environ.get("SLURM_JOB_ID", environ.get("SLURM_JOBID")):
        return False
    try:
        return 0 <= int(found[1]) < _SPECIAL_STEP_IDS
    except ValueError:
        raise ClusterEnvironmentError(
            f"{found[0]}={found[1]!r} is not an integer; SLURM sets it to one."
        ) from None


def slurm_step(environ: Mapping[str, str]) -> SlurmStep | None:
    """This process's task in its srun step, or None outside one; partial variables are an error."""
    if not is_srun_task(environ):
        return None
    job = str(environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID"))
    step = str(_first(environ, "SLURM_STEP_ID", "SLURM_STEPID")[1])  # type: ignore[index]
    proc_id = _required_int(environ, "SLURM_PROCID")
    num_tasks = _required_int(environ, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS")
    local_id = _required_int(environ, "SLURM_LOCALID")
    node_id = _required_int(environ, "SLURM_NODEID")
    nodes_found = _first(environ, "SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NODELIST")
    if nodes_found is None:
        raise ClusterEnvironmentError(
            "This process runs in an srun step but none of SLURM_STEP_NODELIST, SLURM_NODELIST, "
            "SLURM_JOB_NODELIST is set, so the main node is unknown; set MASTER_ADDR to it."
        )
    try:
        nodes = tuple(expand_hostlist(nodes_found[1]))
    except ValueError as exc:
        raise ClusterEnvironmentError(f"{nodes_found[0]}={nodes_found[1]!r} cannot be read: {exc}.") from None
    counts = _tasks_per_node(environ, num_tasks, len(nodes))
    found = SlurmStep(job, step, proc_id, num_tasks, local_id, node_id, counts, nodes, nodes_found[0])
    _check_step(found)
    return found


def _tasks_per_node(environ: Mapping[str, str], num_tasks: int, num_nodes: int) -> tuple[int, ...]:
    listed = _first(environ, "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
    if listed is not None:
        try:
            return tuple(expand_tasks_per_node(listed[1]))
        except ValueError as exc:
            raise ClusterEnvironmentError(f"{listed[0]}={listed[1]!r} cannot be read: {exc}.") from None
    uniform = _first(environ, "SLURM_NTASKS_PER_NODE")
    if uniform is not None and uniform[1].isdigit():
        return (int(uniform[1]),) * num_nodes
    if num_tasks % num_nodes == 0:
        return (num_tasks // num_nodes,) * num_nodes
    raise ClusterEnvironmentError(
        f"SLURM_STEP_TASKS_PER_NODE is not set and {num_tasks} tasks do not divide evenly over {num_nodes} "
        "nodes, so the tasks on this node are unknown; start the script with `srun`."
    )


def _check_step(step: SlurmStep) -> None:
    """The variables must describe one consistent world; say which ones disagree."""
    problems = []
    if len(step.tasks_per_node) != step.num_nodes:
        problems.append(
            f"the task counts per node list {len(step.tasks_per_node)} nodes but {step.nodes_variable} lists "
            f"{step.num_nodes}"
        )
    elif sum(step.tasks_per_node) != step.num_tasks:
        problems.append(
            f"the task counts per node add up to {sum(step.tasks_per_node)}, not SLURM_NTASKS={step.num_tasks}"
        )
    if not 0 <= step.proc_id < step.num_tasks:
        problems.append(f"SLURM_PROCID={step.proc_id} is not below SLURM_NTASKS={step.num_tasks}")
    if not 0 <= step.node_id < step.num_nodes:
        problems.append(f"SLURM_NODEID={step.node_id} is not below the {step.num_nodes} nodes of the step")
    elif not problems and not 0 <= step.local_id < step.local_tasks:
        problems.append(
            f"SLURM_LOCALID={step.local_id} is not below the {step.local_tasks} tasks on this node"
        )
    if problems:
        raise ClusterEnvironmentError(
            "The SLURM variables of this task contradict each other: " + "; ".join(problems) + "."
        )


def batch_job(environ: Mapping[str, str]) -> tuple[str, int, int] | None:
    """(job id, nodes, tasks) when this process is the batch script of a job (or a bare allocation)."""
    job = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")
    if not job or is_srun_task(environ):
        return None
    nodes = _first(environ, "SLURM_JOB_NUM_NODES", "SLURM_NNODES")
    tasks = _first(environ, "SLURM_NTASKS", "SLURM_NPROCS")
    as_int = lambda found: int(found[1]) if found and found[1].isdigit() else 1  # noqa: E731
    return job, as_int(nodes), as_int(tasks)
