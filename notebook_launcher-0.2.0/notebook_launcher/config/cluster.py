"""The `cluster_config` section of a launch config: where the ranks run — this machine, a Ray
cluster or SLURM — with each engine's settings, so a config built in the panel can be saved and
reused. `notebook_launch(cluster=...)` wins over it (explicit argument > config file)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError, bad_value

CLUSTER_TYPES = ("local", "ray", "slurm")


@dataclass
class ClusterConfig:
    """Keys of the YAML `cluster_config:` section. `num_nodes` machines (Ray nodes or SLURM nodes),
    each running `num_processes` ranks; the `ray_*` and `slurm_*` keys are those engines' settings."""

    cluster_type: str = "local"
    num_nodes: int = 1
    ray_address: str | None = None
    ray_resources_per_worker: dict[str, float] | None = None
    slurm_partition: str | None = None
    slurm_time: int = 60
    slurm_account: str | None = None
    slurm_gpus_per_node: int = 0
    slurm_cpus_per_task: int | None = None
    slurm_folder: str = "notebook_launcher_jobs"
    slurm_setup: list = field(default_factory=list)  # (plain `list`: _coerce_types leaves it alone)

    def validate(self) -> None:
        self.cluster_type = str(self.cluster_type).lower()
        if self.cluster_type in ("none", "this_machine", "local_machine"):
            self.cluster_type = "local"
        if self.cluster_type not in CLUSTER_TYPES:
            raise bad_value("cluster_config.cluster_type", self.cluster_type, CLUSTER_TYPES)
        if int(self.num_nodes) < 1:
            raise ConfigError(f"cluster_config.num_nodes={self.num_nodes!r} must be at least 1.")
        if int(self.slurm_time) < 1:
            raise ConfigError(
                f"cluster_config.slurm_time={self.slurm_time!r} is in minutes and must be >= 1."
            )
        if int(self.slurm_gpus_per_node) < 0:
            raise ConfigError(
                f"cluster_config.slurm_gpus_per_node={self.slurm_gpus_per_node!r} must be >= 0."
            )
        if self.slurm_cpus_per_task is not None and int(self.slurm_cpus_per_task) < 1:
            raise ConfigError(
                f"cluster_config.slurm_cpus_per_task={self.slurm_cpus_per_task!r} must be >= 1."
            )
        self.ray_resources_per_worker = _resources(self.ray_resources_per_worker)
        self.slurm_setup = _lines(self.slurm_setup)


def _resources(value: Any) -> dict[str, float] | None:
    """{"CPU": 1, "GPU": 1}, or the text "CPU=1, GPU=1" (as typed in the panel)."""
    if value in (None, "", {}):
        return None
    if isinstance(value, str):
        pairs = [item.split("=", 1) for item in value.replace(";", ",").split(",") if item.strip()]
        if any(len(pair) != 2 for pair in pairs):
            raise ConfigError(
                f"cluster_config.ray_resources_per_worker={value!r} cannot be read; write it as CPU=1, GPU=1."
            )
        value = {key.strip(): val.strip() for key, val in pairs}
    if not isinstance(value, dict):
        raise ConfigError(
            f"cluster_config.ray_resources_per_worker={value!r} must map resource names to amounts, e.g. "
            "{CPU: 1, GPU: 1}."
        )
    out = {}
    for key, amount in value.items():
        try:
            out[str(key)] = float(amount)
        except (TypeError, ValueError):
            raise ConfigError(
                f"cluster_config.ray_resources_per_worker: {key}={amount!r} is not a number."
            ) from None
        if out[str(key)] < 0:
            raise ConfigError(f"cluster_config.ray_resources_per_worker: {key}={amount!r} must be >= 0.")
    return out


def _lines(value: Any) -> list[str]:
    """Setup commands: a list, or text with one command per line."""
    if value in (None, ""):
        return []
    if isinstance(value, str):
        return [line.strip() for line in value.splitlines() if line.strip()]
    if not isinstance(value, (list, tuple)) or not all(isinstance(line, str) for line in value):
        raise ConfigError(
            f"cluster_config.slurm_setup={value!r} must be a list of shell commands, e.g. "
            "['source ~/venv/bin/activate']."
        )
    return list(value)
