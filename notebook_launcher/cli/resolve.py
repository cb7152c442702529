"""The command line's layers of a launch: flags > the config file (`--config_file`, else the
per-user default file when it exists) > the SLURM step's machines > what is detected here, then
resolved as every entry is (resolution/). Flags that cannot work together are reported instead of
being dropped: an FSDP flag without FSDP, `--use_fsdp --use_deepspeed`, `--multi_gpu --cpu`.

Under `srun --ntasks-per-node=1` inside an `sbatch` job, the launcher takes the machines, its
machine rank and the main address from the step's variables (resolution/machines.py).
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import LaunchConfig, default_config_path, load_config
from ..resolution import LaunchRequest, resolve_launch
from ..resolution.machines import MACHINE_KEYS, machines_from_slurm
from ..system.hardware import HardwareInfo
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
    args: argparse.Namespace, hardware: HardwareInfo | None = None
) -> tuple[LaunchRequest, ConfigSource]:
    """The launch to run, fully decided (resolution/, as every entry); raises UsageError /
    ConfigError on bad input.

    `hardware` is detected when not given, after every check that does not need it, so bad input
    fails fast without importing torch. The SLURM step's machines fill the machine keys nobody chose.
    """
    base, source = read_config_file(getattr(args, "config_file", None))
    overrides = flag_overrides(args)
    config = base.replace(**overrides)
    chosen = {
        key for key in MACHINE_KEYS if key in overrides or getattr(base, key) != getattr(LaunchConfig(), key)
    }
    config, slurm_note = machines_from_slurm(config, chosen)
    cluster = config.cluster_config.cluster_type
    elsewhere = None
    if cluster != "local":
        elsewhere = (
            f"the config's cluster_config ({cluster}) is for notebook_launch; this command runs the script on "
            "this machine (in a SLURM job: srun notebook-launcher launch ..., see docs/clusters.md)."
        )
    _check_section_flags(args, config)
    processes = overrides.get("num_processes")
    request = resolve_launch(
        config,
        "script",
        processes_given=f"--num_processes {processes}" if processes else None,
        type_given="distributed_type" in overrides,
        threads=getattr(args, "num_cpu_threads_per_process", None),
        hardware=hardware,
    )
    for extra in (slurm_note, elsewhere, *request.notes):
        if extra:
            source = dataclasses.replace(source, notes=(*source.notes, extra))
    return request, source


def shown_config(config: LaunchConfig, hardware: HardwareInfo) -> LaunchConfig:
    """What `config show` prints: the file's config resolved as a script launch would be, except the
    port, which a launch picks when it starts (unset on one machine: any free port)."""
    request = resolve_launch(config, "script", hardware=hardware)
    return dataclasses.replace(request.config, main_process_port=config.main_process_port)
