"""PipelineStrategy: the model cut into stages over the mesh's "pp" dim (torch.distributed.pipelining),
each stage tensor-parallel and FSDP2-sharded as ModelParallelStrategy splits a whole model.

What differs from ModelParallelStrategy: each rank keeps only its stages' blocks (the optimizer is
re-bound to them, the rest dropped), the schedule runs backward (accelerator.backward is a no-op for
the loss `model.step` returns), the gradient norm spans the stages, full state dicts are gathered
from one rank per stage, and save_state always writes torch.distributed.checkpoint folders (every
rank its own stage's pieces, under the model's original names).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn

from ....config.pipeline import units
from ....errors import AcceleratorError
from ...data.stage_batches import StageData
from ...strategies.fsdp import checkpoint as ckpt
from ...strategies.fsdp.strategy import _note
from ..mesh import local_rank
from ..strategy import ModelParallelStrategy, _broadcast_plain_tensors
from .cut import skeleton, stage_unit_names
from .model import PipelineModel, stages_of_rank


class PipelineStrategy(ModelParallelStrategy):
    name = "PIPELINE"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._dropped: set[int] = set()  # ids of the original parameters other ranks hold
        self._key_order: list[str] = []  # the whole model's state dict order
        self.pp_rank = local_rank(self.device_mesh, "pp")
        self._readers: Any = None  # the group of the first and last stages' processes (dispatched data)

    @property
    def pp_group(self) -> Any:
        return self.device_mesh["pp"].get_group()

    # ----------------------------------------------------------------- models
    def wrap_model(self, model: nn.Module, *, device_placement: bool = True) -> nn.Module:
        if isinstance(model, PipelineModel):
            raise AcceleratorError("This model is already a prepared pipeline; pass the plain model.")
        units(model)  # a chain of blocks, or an error that says how to write one, before any work
        self.materialize(model)
        if device_placement:
            model = model.to(self.state.device)
        before = dict(model.named_parameters())
        self._key_order = list(model.state_dict().keys())
        model = self.convert_precision(model)
        if self.fsdp.fsdp_sync_module_states and self.state.world_size > 1:
            _broadcast_plain_tensors(model)  # every rank cuts the same weights (rank 0's)
        handler = self.parallelism.pp_handler
        assert handler is not None  # ParallelismConfig sets one when pp_size > 1
        pp_size = int(self.parallelism.pp_size or 1)
        n_stages = handler.stage_count(pp_size)
        names = stage_unit_names(units(model), n_stages, handler.split_points)
        mine = stages_of_rank(handler.schedule, pp_size, n_stages, self.pp_rank)
        stage_modules = []
        for index in mine:
            stage = self.split_module(skeleton(model, names[index]))  # TP, then FSDP2, per stage
            self.precision.wrap_forward(stage)
            stage_modules.append(stage)
        local = skeleton(model, [n for index in mine for n in names[index]])
        prepared = PipelineModel(
            local,
            stage_modules,
            mine,
            n_stages=n_stages,
            settings=handler,
            pp_group=self.pp_group,
            pp_rank=self.pp_rank,
            pp_size=pp_size,
            device=self.state.device,
            grad_divisor=lambda: int(self.gradient_state.num_steps) if self.gradient_state else 1,
        )
        kept = dict(prepared.named_parameters())
        self._dropped |= {id(p) for name, p in before.items() if name not in kept}
        self._remember_new_parameters(before, prepared)
        _note(
            self.state,
            f"pipeline: {n_stages} stages ({handler.schedule}, {handler.microbatches(pp_size)} micro-batches); "
            f"pp rank {self.pp_rank} holds stage(s) {mine}: " + "; ".join(", ".join(names[i]) for i in mine),
        )
        return prepared

    def data_stage(self) -> StageData:
        """Only the ranks of the first and the last stage read batches (runtime/data/stage_batches.py);
        dispatched batches go to those ranks only."""
        handler = self.parallelism.pp_handler
        assert handler is not None  # ParallelismConfig sets one when pp_size > 1
        pp_size = int(self.parallelism.pp_size or 1)
        n_stages = handler.stage_count(pp_size)
        reading = [
            0 in stages or n_stages - 1 in stages
            for stages in (stages_of_rank(handler.schedule, pp_size, n_stages, r) for r in range(pp_size))
        ]
        if all(reading):
            return StageData(reads=True, group=self.pp_group, has_middle=False)
        if self._readers is None:  # once: new_group is a collective of every process
            ranks = self.device_mesh.mesh.movedim(self.device_mesh.mesh_dim_names.index("pp"), 0)
            self._readers = dist.new_group(
                sorted(int(q) for r in range(pp_size) if reading[r] for q in ranks[r].flatten())
            )
        return StageData(reads=reading[self.pp_rank], group=self.pp_group, readers=self._readers)

    def _rebind(self, optimizer: torch.optim.Optimizer) -> None:
        """The optimizer keeps this rank's parameters only (sharded ones where FSDP2/TP replaced them)."""
        for group in optimizer.param_groups:
            group["params"] = [
                self._new_params.get(id(p), p) for p in group["params"] if id(p) not in self._dropped
            ]
        for stale in [p for p in optimizer.state if id(p) in self._dropped]:
            del optimizer.state[stale]

    # --------------------------------------------------------------- training
    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """model.step already ran backward; a loss that still needs one was not made by model.step."""
        if loss.requires_grad:
            raise AcceleratorError(
                "In a pipeline, `loss = model.step(inputs, target)` runs forward and backward of every "
                "micro-batch; accelerator.backward(loss) then does nothing. This loss still has a graph, so it "
                "was computed outside model.step: it cannot reach the other stages' weights."
            )

    def total_grad_norm(self, params: list[torch.Tensor], norm_type: float) -> torch.Tensor:
        """The norm over every stage: each rank's stage norm, combined over the pp group."""
        local = super().total_grad_norm(params, norm_type) if params else torch.tensor(0.0)
        local = local.to(self.state.device)
        if math.isinf(norm_type):
            dist.all_reduce(local, op=dist.ReduceOp.MAX, group=self.pp_group)
            return local
        powered = local.double() ** norm_type
        dist.all_reduce(powered, group=self.pp_group)
        return (powered ** (1.0 / norm_type)).float()

    def clip_grad_norm_(self, parameters: Any, max_norm: float, norm_type: float = 2.0) -> torch.Tensor:
        params = [p for p in parameters if p.grad is not None]
        total = self.total_grad_norm(params, norm_type)  # a collective: every rank, even without grads
        coef = min(float(max_norm) / (float(total) + 1e-6), 1.0)  # torch's clip_grads_with_norm_ rule
        if coef < 1.0:
            with torch.no_grad():
                for p in params:
                    cast(torch.Tensor, p.grad).mul_(coef)
        return total

    # ------------------------------------------------------------ state dicts
    def model_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """The whole model's weights under its original names on rank 0 ({} elsewhere): each stage's
        pieces made whole in its own groups, then one rank per stage sends them to rank 0."""
        from torch.distributed.tensor import DTensor

        local: dict[str, torch.Tensor] = {}
        for key, value in model.state_dict().items():
            value = value.full_tensor() if isinstance(value, DTensor) else value
            local[key] = value.detach().cpu()
        dims = [d for d in (self.device_mesh.mesh_dim_names or ()) if d != "pp"]
        sender = all(local_rank(self.device_mesh, d) == 0 for d in dims)
        parts: list[Any] | None = [None] * self.state.world_size if self.state.is_main_process else None
        dist.gather_object(local if sender else None, parts, dst=0)
        if parts is None:
            return {}
        merged: dict[str, torch.Tensor] = {}
        for part in parts:
            merged.update(part or {})
        return {k: merged[k] for k in self._key_order if k in merged}

    def save_training_state(
        self, folder: Path, models: list[nn.Module], optimizers: list[Any], writer: Any = None
    ) -> None:
        ckpt.save_sharded(
            folder, models, optimizers, ckpt.SHARDED_BY_NAME, writer
        )  # each stage's pieces, by name

    def load_training_state(self, folder: Path, models: list[nn.Module], optimizers: list[Any]) -> None:
        ckpt.load_sharded(folder, models, optimizers, ckpt.SHARDED_BY_NAME)

    @property
    def saves_on_every_rank(self) -> bool:
        return True
