"""What the Accelerator decides about a mesh: the config (checked against the world size before the
process group forms), the distributed type it implies, the mesh, and the strategy that uses it."""

from __future__ import annotations

from typing import Any

from ...config import LaunchConfig
from ...config.parallelism import ParallelismConfig
from ..world.environments import detect_world
from .mesh import build_mesh, check_device, resolve_config


def world_size_now() -> int:
    """The run's world size, from the process group if there is one, else from the launch's variables."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return detect_world().world_size


def plan_parallelism(given: Any, config: LaunchConfig) -> tuple[ParallelismConfig | None, LaunchConfig]:
    """The ParallelismConfig of this run (or None) and the launch config it implies: dp_shard > 1 is
    FSDP2 whether or not an FSDP plugin was given (Accelerate wants fsdp_version=2 set; here both work)."""
    parallelism = resolve_config(given, config.parallelism_config, world_size_now)
    if parallelism is None:
        return None, config
    if config.use_cpu:
        check_device(parallelism, "cpu")
    if parallelism.dp_shard_enabled or parallelism.cp_enabled:
        config = config.replace(distributed_type="FSDP")
    return parallelism, config


def mesh_and_strategy(parallelism: ParallelismConfig | None, process: Any) -> tuple[Any, str | None]:
    """(the DeviceMesh, the strategy registry key) — (None, None) when no mesh is asked for."""
    if parallelism is None or process.world_size == 1:
        return None, None
    mesh = build_mesh(parallelism, process.device.type)
    if parallelism.pp_enabled:
        return mesh, "PIPELINE"
    split = parallelism.tp_enabled or parallelism.dp_shard_enabled or parallelism.cp_enabled
    return mesh, ("PARALLELISM" if split else None)
