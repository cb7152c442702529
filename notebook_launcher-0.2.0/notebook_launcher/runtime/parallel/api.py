"""The Accelerator's mesh properties, Accelerate 1.x's names (a mixin kept apart from the facade)."""

from __future__ import annotations

from typing import Any

from ...config.parallelism import ParallelismConfig
from ...errors import AcceleratorError
from .mesh import local_rank


class ParallelismAPI:
    """Mixed into Accelerator; needs `self._parallelism` and `self._device_mesh`."""

    _parallelism: ParallelismConfig | None
    _device_mesh: Any

    @property
    def parallelism_config(self) -> ParallelismConfig | None:
        return self._parallelism

    @property
    def torch_device_mesh(self) -> Any:
        """The run's DeviceMesh: dims dp_replicate, dp_shard, cp, tp (the active ones, in that order),
        plus the flattened "dp", "dp_shard_cp" and "dp_cp"; None without a parallelism_config."""
        return self._device_mesh

    @property
    def is_composable_parallelism_enabled(self) -> bool:
        """True when the model is split over a mesh (FSDP2 and/or TP through a ParallelismConfig)."""
        pc = self._parallelism
        return pc is not None and (pc.tp_enabled or pc.dp_shard_enabled or pc.cp_enabled)

    def _mesh_rank(self, dim: str, what: str) -> int:
        if self._parallelism is None:
            raise AcceleratorError(
                f"{what} needs a mesh: create the Accelerator with parallelism_config=ParallelismConfig(...)."
            )
        return local_rank(self._device_mesh, dim)

    @property
    def tensor_parallel_rank(self) -> int:
        """This rank's index in its tensor-parallel group (0 when tp is off)."""
        return self._mesh_rank("tp", "tensor_parallel_rank")

    @property
    def data_parallel_rank(self) -> int:
        """This rank's replica index (dp_replicate; 0 when off), Accelerate's meaning."""
        return self._mesh_rank("dp_replicate", "data_parallel_rank")

    @property
    def data_parallel_shard_rank(self) -> int:
        """This rank's index among the FSDP shards (dp_shard; 0 when off)."""
        return self._mesh_rank("dp_shard", "data_parallel_shard_rank")

    @property
    def context_parallel_rank(self) -> int:
        """This rank's index in its context-parallel group (0 when cp is off)."""
        return self._mesh_rank("cp", "context_parallel_rank")
