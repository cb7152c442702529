"""One LaunchConfig from the command line, the config file and this machine.

Precedence: a flag given on the command line > the config file (`--config_file`, else the
per-user default file when it exists) > what is detected here. Values that cannot work together
are reported instead of being dropped: an FSDP flag without FSDP, `--use_fsdp --use_deepspeed`,
MULTI_GPU without a GPU, several machines without the address of machine 0.

Detected here includes SLURM: run once per node by `srun --ntasks-per-node=1` inside an `sbatch`
job, the launcher takes the machines, its machine rank and the main address from the step's
variables (machines_from_slurm).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import LaunchConfig, default_config_path, load_config
from ..errors import ConfigError, install_hint
from ..system.network import DEFAULT_PORT, LOOPBACK
from ..system.schedulers import batch_job, slurm_step
from .flags import DEEPSPEED_FLAGS, FLAGS, FSDP_FLAGS, UsageError


@dataclass(frozen=True)
class ConfigSource:
    """Where the file layer of the config came from (None: no file, defaults only)."""

    path: Path | None
    notes: tuple[str, ...] = ()  # what was detected and worth one line each (e.g. machines from SLURM)

    def describe(self) -> str:
        return f"config file {str(self.path)!r}" if self.path else "no config file"


def read_config_file(config_file: str | None) -> tuple[LaunchConfig, ConfigSource]:
    """The config in `config_file`, else in the default file when it exists, else all defaults."""
    if config_file:
        return load_config(config_file), ConfigSource(Path(config_file).expanduser())
    default = default_config_path()
    if default.is_file():
        return load_config(default), ConfigSource(default)
    return LaunchConfig(), ConfigSource(None)


def flag_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The LaunchConfig fields set by flags that were given, nested like LaunchConfig.replace wants."""
    overrides: dict[str, Any] = {}
    for flag in FLAGS:
        value = getattr(args, flag.name, None)
        if flag.key is None or value is None:
            continue
        section, _, field = flag.key.rpartition(".")
        if section:
            overrides.setdefault(section, {})[field] = value
        else:
            overrides[field] = value
    strategy = _strategy_from_flags(args)
    if strategy:
        overrides["distributed_type"] = strategy
    if getattr(args, "fsdp_fully_shard", None):
        fsdp = overrides.setdefault("fsdp_config", {})
        if fsdp.get("fsdp_version", 2) != 2:
            raise UsageError(
                "--fsdp_fully_shard is FSDP2 and contradicts --fsdp_version 1; drop one of them."
            )
        fsdp["fsdp_version"] = 2
    return overrides


def _strategy_from_flags(args: argparse.Namespace) -> str | None:
    fsdp = bool(getattr(args, "use_fsdp", None))
    deepspeed = bool(getattr(args, "use_deepspeed", None) or getattr(args, "deepspeed", None))
    if fsdp and deepspeed:
        given = "--use_deepspeed" if getattr(args, "use_deepspeed", None) else "--deepspeed"
        raise UsageError(f"--use_fsdp and {given} cannot be combined: pick one sharding strategy.")
    if getattr(args, "multi_gpu", None) and getattr(args, "cpu", None):
        raise UsageError("--multi_gpu and --cpu contradict each other: drop one of them.")
    if fsdp:
        return "FSDP"
    if deepspeed:
        return "DEEPSPEED"
    if getattr(args, "multi_gpu", None):
        return "MULTI_GPU"
    return None


def _check_section_flags(args: argparse.Namespace, config: LaunchConfig) -> None:
    """FSDP / DeepSpeed flags only mean something with that strategy; never ignore them silently."""
    for names, strategy, switch in (
        (FSDP_FLAGS, "FSDP", "--use_fsdp"),
        (DEEPSPEED_FLAGS, "DEEPSPEED", "--use_deepspeed"),
    ):
        given = [f"--{name}" for name in names if getattr(args, name, None) is not None]
        if given and config.distributed_type != strategy:
            current = config.distributed_type or "plain data parallel"
            raise UsageError(
                f"{given[0]} applies only to distributed_type {strategy}, but this run uses {current}; "
                f"add {switch} (or set distributed_type: {strategy} in the config file)."
            )


def resolve_launch_config(
    args: argparse.Namespace, hardware: Any = None
) -> tuple[LaunchConfig, ConfigSource]:
    """The config to launch with, fully filled in; raises UsageError / ConfigError on bad input.

    `hardware` is a `notebook_launcher.system.hardware.HardwareInfo`; detected here when not given (after
    every check that does not need it, so bad input fails fast without importing torch).
    """
    base, source = read_config_file(getattr(args, "config_file", None))
    overrides = flag_overrides(args)
    config, single = _processes_flag_beats_single(base.replace(**overrides), overrides)
    chosen = {
        key for key in MACHINE_KEYS if key in overrides or getattr(base, key) != getattr(LaunchConfig(), key)
    }
    config, note = machines_from_slurm(config, chosen)
    cluster = config.cluster_config.cluster_type
    elsewhere = None
    if cluster != "local":
        elsewhere = (
            f"the config's cluster_config ({cluster}) is for notebook_launch; this command runs the script on "
            "this machine (in a SLURM job: srun notebook-launcher launch ..., see docs/clusters.md)."
        )
    for extra in (single, note, elsewhere):
        if extra:
            source = dataclasses.replace(source, notes=(*source.notes, extra))
    _check_section_flags(args, config)
    check_without_hardware(config)
    if config.distributed_type == "DEEPSPEED" and importlib.util.find_spec("deepspeed") is None:
        raise ConfigError(
            "distributed_type=DEEPSPEED needs the deepspeed package, which is not installed here; "
            f"install it with {install_hint('deepspeed', 'deepspeed')}, or choose another strategy."
        )
    if hardware is None:
        from ..system.hardware import detect

        hardware = detect()
    return fill_detected(config, hardware), source


def _processes_flag_beats_single(
    config: LaunchConfig, overrides: dict[str, Any]
) -> tuple[LaunchConfig, str | None]:
    """A config file's distributed_type NO (written for one process) yields to --num_processes N, with
    a note; the flag is the more explicit of the two. NO with several processes from one source is an
    error later (fill_detected)."""
    processes = overrides.get("num_processes")
    if config.distributed_type != "NO" or not processes or processes <= config.num_machines:
        return config, None
    if "distributed_type" in overrides:
        return config, None
    data = config.to_dict()
    data["distributed_type"] = None
    note = (
        f"--num_processes {processes} overrides the config file's distributed_type NO (one process); the "
        "strategy is detected instead."
    )
    return LaunchConfig.from_dict(data, source="flags"), note


def visible_gpu_count(config: LaunchConfig, hardware: Any) -> int:
    from ..system.hardware import visible_gpu_count as count

    return count(config.gpu_ids, hardware)


def fill_detected(config: LaunchConfig, hardware: Any) -> LaunchConfig:
    """Fill what neither flags nor file set, from this machine; reject what it cannot run."""
    gpus = visible_gpu_count(config, hardware)
    if config.gpu_ids and config.gpu_ids != "all" and not config.runs_on_cpu:
        missing = [i for i in config.gpu_ids.split(",") if int(i) >= hardware.cuda_device_count]
        if missing:
            raise ConfigError(
                f"gpu_ids={config.gpu_ids!r} names GPU {missing[0]}, but this machine has "
                f"{hardware.cuda_device_count} CUDA GPU(s); list indices below {hardware.cuda_device_count}."
            )
    on_gpu = gpus > 0 and not config.runs_on_cpu
    num_processes = config.num_processes or config.num_machines * (gpus if on_gpu else 1)
    local = num_processes // config.num_machines
    distributed_type = _distributed_type(config, num_processes, on_gpu)
    if distributed_type == "MULTI_GPU" and local > gpus:
        raise ConfigError(
            f"num_processes={num_processes} means {local} processes on this machine, one per GPU, but only "
            f"{gpus} GPU(s) are visible; lower --num_processes, or add --cpu to run on CPU."
        )
    _check_precision(config, hardware, on_gpu)
    check_without_hardware(config)
    ip = config.main_process_ip or LOOPBACK
    port = DEFAULT_PORT if config.main_process_port is None else config.main_process_port
    return config.replace(
        num_processes=num_processes,
        distributed_type=distributed_type,
        main_process_ip=ip,
        main_process_port=port,
    )


def check_without_hardware(config: LaunchConfig) -> None:
    """The checks that need no hardware detection (so they fail fast, before torch is imported)."""
    if config.main_process_ip is None and config.num_machines > 1:
        raise ConfigError(
            f"num_machines={config.num_machines} needs main_process_ip: the address of machine 0 that every "
            "machine can reach; pass --main_process_ip."
        )
    if config.main_process_port == 0 and config.num_machines > 1:
        raise ConfigError(
            "main_process_port=0 (pick a free port) works only on one machine: every machine must be given the "
            f"same port; pass e.g. --main_process_port {DEFAULT_PORT}."
        )
    ds_file = config.deepspeed_config.deepspeed_config_file
    if config.distributed_type == "DEEPSPEED" and ds_file and not Path(ds_file).expanduser().is_file():
        raise ConfigError(f"DeepSpeed config file {ds_file!r} does not exist; pass the path of a JSON file.")


def _distributed_type(config: LaunchConfig, num_processes: int, on_gpu: bool) -> str:
    """The user's choice when given (MULTI_CPU stays on CPU on a GPU machine), else detected."""
    chosen = config.distributed_type
    if chosen in ("FSDP", "DEEPSPEED"):
        return chosen
    if chosen == "NO" and num_processes > 1:
        raise ConfigError(
            f"distributed_type=NO runs a single process, but num_processes={num_processes}; set num_processes "
            "to 1, or distributed_type to MULTI_GPU / MULTI_CPU (or remove it to detect it)."
        )
    if chosen == "MULTI_GPU" and not on_gpu:
        if config.use_cpu:
            return "MULTI_CPU" if num_processes > 1 else "NO"
        raise ConfigError(
            "distributed_type=MULTI_GPU needs CUDA GPUs and none is visible here; add --cpu "
            "(or set distributed_type: MULTI_CPU) to run on CPU."
        )
    if num_processes > 1:
        return "MULTI_GPU" if on_gpu else "MULTI_CPU"
    return "NO"


def _check_precision(config: LaunchConfig, hardware: Any, on_gpu: bool) -> None:
    if config.mixed_precision == "fp8" and not (on_gpu and hardware.fp8_supported):
        raise ConfigError(
            "mixed_precision='fp8' needs CUDA GPUs of compute capability 8.9+ (Ada/Hopper) and this run has "
            "none; use --mixed_precision bf16."
        )
    if config.mixed_precision == "bf16" and on_gpu and not hardware.bf16_supported:
        raise ConfigError(
            "mixed_precision='bf16' needs GPUs of compute capability 8.0+ (Ampere) and this machine's are older; "
            "use --mixed_precision fp16."
        )


# ------------------------------------------------------------------ SLURM

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
