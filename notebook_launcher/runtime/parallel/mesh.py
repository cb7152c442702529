"""The run's DeviceMesh from a ParallelismConfig: Accelerate's dim names, order and flattened dims
("dp", "dp_shard_cp", "dp_cp"), and which ranks share data.

Ranks are laid out row-major over (pp, dp_replicate, dp_shard, cp, tp): tp is the fastest dimension,
so tensor-parallel partners are neighbours (one machine), as torchtitan places them; pipeline stages
are the outermost (the slowest links carry only activations between stages).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ...config.parallelism import ParallelismConfig, from_section, section_is_set
from ...errors import ConfigError


def resolve_config(
    given: Any, section: dict | None, world_size: Callable[[], int]
) -> ParallelismConfig | None:
    """The run's ParallelismConfig: the argument, else the launch config's section, else
    ACCELERATE_USE_PARALLELISM_CONFIG (what `accelerate launch` exports); checked against the
    world size here, before any process group exists."""
    config = _adopt(given)
    if config is None and section_is_set(section):
        config = from_section(section or {})
    if config is None and os.environ.get("ACCELERATE_USE_PARALLELISM_CONFIG", "").lower() == "true":
        config = ParallelismConfig()
    if config is None:
        return None
    world = world_size()  # asked only when there is a mesh to check
    if config.total_size == 1 and world > 1:
        config.dp_replicate_size = world  # Accelerate's meaning: plain data parallel (DDP)
    config.check_world_size(world)
    return config


def _adopt(given: Any) -> ParallelismConfig | None:
    """Ours as is; Accelerate's own ParallelismConfig by its fields."""
    if given is None or isinstance(given, ParallelismConfig):
        return given
    if type(given).__name__ == "ParallelismConfig":
        from ...config.parallelism import TorchTensorParallelConfig

        handler = getattr(given, "tp_handler", None)
        sizes: dict[str, Any] = {
            n: getattr(given, n, 1) for n in ("dp_replicate_size", "dp_shard_size", "tp_size", "cp_size")
        }
        return ParallelismConfig(
            **sizes,
            sp_size=getattr(given, "sp_size", 1) or 1,
            tp_handler=TorchTensorParallelConfig() if handler is not None else None,
        )
    raise ConfigError(
        f"parallelism_config={given!r} must be a ParallelismConfig "
        "(from notebook_launcher import ParallelismConfig)."
    )


def check_device(config: ParallelismConfig, device_type: str) -> None:
    """Context parallel needs torch's context_parallel: CUDA with SDPA (ring attention)."""
    if config.cp_enabled and device_type != "cuda":
        raise ConfigError(
            f"ParallelismConfig cp_size={config.cp_size} on {device_type}: context parallelism is torch's "
            "context_parallel, which splits sequences for scaled_dot_product_attention's CUDA kernels (ring "
            f"attention) and has no {device_type} implementation. Set cp_size=1 here (use dp_shard_size or "
            "tp_size for the ranks), or run on CUDA GPUs."
        )


def build_mesh(config: ParallelismConfig, device_type: str) -> Any:
    """init_device_mesh with the active dims, plus Accelerate's flattened dims; None if none is active."""
    from torch.distributed.device_mesh import init_device_mesh

    check_device(config, device_type)
    names, shape = config.mesh_layout()
    if not names:
        return None
    mesh = init_device_mesh(device_type, shape, mesh_dim_names=names)
    for joint, dims in (
        ("dp", config.dp_dim_names),
        ("dp_shard_cp", config.dp_shard_cp_dim_names),
        ("dp_cp", config.dp_cp_dim_names),
    ):
        if dims:
            mesh[tuple(dims)]._flatten(joint)
    config.device_mesh = mesh
    return mesh


def local_rank(mesh: Any, dim: str) -> int:
    """This rank's index along a mesh dim; 0 when the dim is not active."""
    if mesh is None or dim not in (mesh.mesh_dim_names or ()):
        return 0
    return int(mesh.get_local_rank(dim))


def data_rank_and_size(config: ParallelismConfig | None, rank: int, world_size: int) -> tuple[int, int]:
    """(index, count) the data loaders shard by: the data-parallel coordinates only, so ranks that
    differ only in tp/cp (or in their pipeline stage) read the same batches."""
    if config is None:
        return rank, world_size
    inner, stage_width = config.non_data_parallel_size, world_size // config._size("pp")
    return (rank % stage_width) // inner, stage_width // inner


def data_leaders(config: ParallelismConfig | None, world_size: int) -> list[int]:
    """One rank per data-parallel group (tp = cp = 0; the last pipeline stage, which holds the
    outputs), in data-rank order: whose samples count."""
    if config is None:
        return list(range(world_size))
    stage_width = world_size // config._size("pp")
    return list(range(world_size - stage_width, world_size, config.non_data_parallel_size))
