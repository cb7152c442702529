"""ModelParallelStrategy: tensor parallel on the mesh's "tp" dim, then FSDP2 over the data dims
("dp_shard_cp", with "dp_replicate" in front for HSDP), in torchtitan's order.

Everything FSDP2 does here (optimizer re-binding by name, no_sync, mixed-precision policy, state
dicts through torch.distributed.checkpoint) is FSDPStrategy's; what differs is the mesh FSDP2 gets,
the TP step before it, and a gradient norm over parameters that live on different meshes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FSDPModule, fully_shard

from ...config.parallelism import ParallelismConfig
from ...errors import AcceleratorError
from ..strategies.fsdp import plan as fsdp_plan
from ..strategies.fsdp.strategy import FSDPStrategy, _checkpoint_activations, _note
from .tensor_parallel import apply_tensor_parallel


class ModelParallelStrategy(FSDPStrategy):
    name = "PARALLELISM"

    def __new__(cls, *args: Any, **kwargs: Any) -> ModelParallelStrategy:
        return object.__new__(cls)  # no NO_SHARD fallback: the mesh decides what is sharded

    def __init__(
        self,
        state: Any,
        config: Any,
        precision: Any,
        *,
        parallelism: ParallelismConfig,
        device_mesh: Any,
        **kwargs: Any,
    ) -> None:
        super().__init__(state, config, precision, **kwargs)
        self.parallelism = parallelism
        self.device_mesh = device_mesh

    @property
    def mesh(self) -> Any:
        """The mesh FSDP2 shards over: (dp_replicate, dp_shard_cp) for HSDP, else dp_shard_cp. Without
        cp, dp_shard_cp is dp_shard itself: sliced by that name (torch deprecates slicing flattened dims)."""
        names = list(self.parallelism.fsdp_dim_names)
        if not self.parallelism.cp_enabled:
            names = ["dp_shard" if n == "dp_shard_cp" else n for n in names]
        return self.device_mesh[names[0] if len(names) == 1 else tuple(names)]

    @property
    def shards_data(self) -> bool:
        return self.parallelism.dp_shard_enabled or self.parallelism.cp_enabled

    def wrap_model(self, model: nn.Module, *, device_placement: bool = True) -> nn.Module:
        if isinstance(model, FSDPModule):
            raise AcceleratorError(
                f"{type(model).__name__} is already sharded with fully_shard; pass the plain model."
            )
        self.materialize(model)  # a meta-device build gets a whole copy first (rank 0's weights)
        if device_placement:
            model = model.to(self.state.device)
        before = dict(model.named_parameters())
        model = self.convert_precision(model)
        if self.fsdp.fsdp_sync_module_states and self.state.world_size > 1:
            _broadcast_plain_tensors(model)
        model = self.split_module(model)
        self._remember_new_parameters(before, model)
        self.precision.wrap_forward(model)
        return model

    def split_module(self, model: nn.Module) -> nn.Module:
        """Tensor parallel on "tp", then FSDP2 over the data dims (each pipeline stage gets this too)."""
        if self.parallelism.tp_enabled:
            model, route = apply_tensor_parallel(
                model, self.device_mesh, self.parallelism.tp_handler, cast(int, self.parallelism.tp_size)
            )
            _note(self.state, f"tensor parallel over tp_size={self.parallelism.tp_size}: {route}.")
        if self.shards_data:
            layers = fsdp_plan.layers_to_wrap(model, self.fsdp)
            if self.fsdp.fsdp_activation_checkpointing:
                _checkpoint_activations(layers)
            options = self._shard_options()
            for unit in [*layers, model]:
                fully_shard(unit, **options)
        return model

    def clip_grad_norm_(self, parameters: Iterable[torch.Tensor], max_norm: float, norm_type: float = 2.0):
        """The norm over every rank's pieces, for parameters split on different meshes (TP layers
        next to whole ones); returns it as a plain tensor, the same on every rank."""
        params = [p for p in parameters if p.grad is not None]
        if not params:
            return torch.tensor(0.0)
        total = self.total_grad_norm(params, norm_type)
        coef = min(float(max_norm) / (float(total) + 1e-6), 1.0)  # torch's clip_grads_with_norm_ rule
        if coef < 1.0:
            with torch.no_grad():
                for p in params:
                    cast(torch.Tensor, p.grad).mul_(coef)  # params: those with a grad
        return total

    def total_grad_norm(self, params: list[torch.Tensor], norm_type: float) -> torch.Tensor:
        """The norm of these parameters' gradients over every rank's pieces."""
        norms = []
        for p in params:
            norm = torch.linalg.vector_norm(p.grad, norm_type)
            norms.append(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
        return torch.linalg.vector_norm(torch.stack([n.float() for n in norms]), norm_type)


def _broadcast_plain_tensors(model: nn.Module) -> None:
    """Every rank starts from rank 0's weights (tensors not yet split: a model split when it was
    loaded keeps its DTensors as they are)."""
    from torch.distributed.tensor import DTensor

    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            if not isinstance(tensor, DTensor):
                dist.broadcast(tensor.data, src=0)
