"""FSDP on torch's FSDP2 (`torch.distributed.fsdp.fully_shard`): parameters, gradients and optimizer
state are sharded over the ranks; each layer is gathered only while it runs.

What the config's `fsdp_config` does here:

- fsdp_sharding_strategy: FULL_SHARD (free gathered weights after forward), SHARD_GRAD_OP (keep
  them until backward), HYBRID_SHARD (2-D mesh: shard within a machine, replicate across), NO_SHARD
  (nothing to shard: falls back to DDP, with a note).
- fsdp_auto_wrap_policy + fsdp_transformer_layer_cls_to_wrap / fsdp_min_num_params: which
  submodules become their own FSDP unit (see plan.py); the root is always one.
- fsdp_offload_params: sharded parameters (and so gradients and optimizer state) live on the CPU.
- fsdp_activation_checkpointing: the wrapped layers recompute activations in backward.
- mixed_precision bf16/fp16: FSDP's MixedPrecisionPolicy (compute in that dtype, reduce in fp32).
- fsdp_state_dict_type: what save_state writes (see checkpoint.py); save_model is always full.

The optimizer rule: sharding replaces every parameter by a new (DTensor) parameter. An optimizer
created before prepare() still points at the old ones, so prepare() re-binds it to the sharded
parameters by name (it must not have stepped yet). An optimizer created after prepare(model) from
`model.parameters()` already holds the sharded ones. Both work; creating it after is the FSDP idiom.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import (
    CPUOffloadPolicy,
    FSDPModule,
    MixedPrecisionPolicy,
    OffloadPolicy,
    fully_shard,
)

from ....errors import AcceleratorError, ConfigError
from ...big_modeling import init_empty_weights
from ...checkpointing.writers import ImmediateWriter
from ..base import Strategy
from ..materialize import LOCAL, release_storage, weights_source
from ..process_group import ensure_process_group
from . import checkpoint as ckpt
from . import plan as fsdp_plan
from .sharded_init import shard_and_fill


def _note(state: Any, message: str) -> None:
    if state.is_main_process:
        print(f"notebook_launcher: {message}", flush=True)


class FSDPStrategy(Strategy):
    name = "FSDP"
    shards_weights = True

    def __new__(
        cls, state: Any, config: Any, precision: Any, **kwargs: Any
    ) -> Any:  # NO_SHARD: a DDPStrategy or Strategy
        if config.fsdp_config.fsdp_sharding_strategy == "NO_SHARD":
            from ..ddp import DDPStrategy

            _note(state, "fsdp_sharding_strategy=NO_SHARD shards nothing; training with DDP instead.")
            fallback = DDPStrategy if state.world_size > 1 else Strategy
            return fallback(state, config, precision, **kwargs)
        return super().__new__(cls)

    def __init__(self, state: Any, config: Any, precision: Any, **kwargs: Any) -> None:
        super().__init__(state, config, precision, **kwargs)
        self.fsdp = config.fsdp_config
        ensure_process_group(state)
        self._mesh = None
        self._new_params: dict[int, nn.Parameter] = {}  # id(parameter before sharding) -> sharded one
        self._optimizers: list[torch.optim.Optimizer] = []
        _report_inert_settings(state, self.fsdp)
        # FSDP2 warns whenever the root returns a view (any Linear on a 3-D batch does); only in-place
        # edits of the model's output would be affected, which training loops do not do.
        warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")
        if precision.scaler is not None:
            precision.scaler = _sharded_scaler(precision.scaler)

    # ----------------------------------------------------------------- models
    @property
    def mesh(self):
        if self._mesh is None:
            shape = fsdp_plan.mesh_shape(
                self.fsdp.fsdp_sharding_strategy, self.state.world_size, self.state.local_world_size
            )
            names = ("replicate", "shard") if len(shape) == 2 else ("shard",)
            self._mesh = init_device_mesh(self.state.device.type, shape, mesh_dim_names=names)
        return self._mesh

    def sharded_init(self) -> contextlib.AbstractContextManager:
        """Rank 0 builds the real model; the others build it on the meta device. prepare() then
        sends rank 0's values into the shards (Accelerate's fsdp_cpu_ram_efficient_loading)."""
        return contextlib.nullcontext() if self.state.is_main_process else init_empty_weights()

    def wrap_model(self, model: nn.Module, *, device_placement: bool = True) -> nn.Module:
        if isinstance(model, FSDPModule):
            raise AcceleratorError(
                f"{type(model).__name__} is already sharded with fully_shard; pass the plain model."
            )
        source = weights_source(model, self.state.device, self.fsdp.fsdp_cpu_ram_efficient_loading)
        if device_placement and source == LOCAL:
            model = model.to(self.state.device)
        before = dict(model.named_parameters())
        model = self.convert_precision(model)
        layers = fsdp_plan.layers_to_wrap(model, self.fsdp)
        if source == LOCAL and self.fsdp.fsdp_sync_module_states and self.state.world_size > 1:
            _broadcast_from_rank0(model)
        if self.fsdp.fsdp_activation_checkpointing:
            _checkpoint_activations(layers)
        options = self._shard_options()

        def shard() -> None:
            for unit in [*layers, model]:
                old = list(unit.parameters())
                fully_shard(unit, **options)
                kept = {id(p) for p in unit.parameters()}
                for param in old:  # the unit's full copy is not needed once its shards exist
                    if id(param) not in kept:
                        release_storage(param)

        if source == LOCAL:
            shard()
        else:  # built on the meta device somewhere: shard empty, then fill only the local shards
            note = shard_and_fill(
                model,
                shard,
                source,
                device=self.state.device,
                offload=bool(self.fsdp.fsdp_offload_params),
                rank=self.state.rank,
            )
            if note:
                _note(self.state, note)
        self._remember_new_parameters(before, model)
        self.precision.wrap_forward(model)
        return model

    def _shard_options(self) -> dict[str, Any]:
        dtype = fsdp_plan.policy_dtype(self.precision.mode)
        policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32 if dtype else None)
        offload: OffloadPolicy = OffloadPolicy()
        if self.fsdp.fsdp_offload_params:
            offload = CPUOffloadPolicy(pin_memory=self.state.device.type == "cuda")
        return {
            "mesh": self.mesh,
            "reshard_after_forward": self.fsdp.reshard_after_forward,
            "mp_policy": policy,
            "offload_policy": offload,
        }

    def _remember_new_parameters(self, before: dict[str, nn.Parameter], model: nn.Module) -> None:
        after = dict(model.named_parameters())
        for name, old in before.items():
            if name in after and after[name] is not old:
                self._new_params[id(old)] = after[name]
        for optimizer in self._optimizers:  # prepared before this model: re-bind them now
            self._rebind(optimizer)

    # -------------------------------------------------------------- optimizer
    def prepare_optimizer(self, optimizer: torch.optim.Optimizer, models: list[nn.Module]) -> Any:
        self._rebind(optimizer)
        self._optimizers.append(optimizer)
        return optimizer

    def _rebind(self, optimizer: torch.optim.Optimizer) -> None:
        """Point the optimizer's param groups at the sharded parameters that replaced theirs."""
        stale = [p for g in optimizer.param_groups for p in g["params"] if id(p) in self._new_params]
        if not stale:
            return
        if any(optimizer.state.get(p) for p in stale):
            raise AcceleratorError(
                f"{type(optimizer).__name__} already has state (it stepped before prepare()), and FSDP replaced its "
                "parameters with sharded ones. Create the optimizer before training, or after "
                "`model = accelerator.prepare(model)` from `model.parameters()`."
            )
        for group in optimizer.param_groups:
            group["params"] = [self._new_params.get(id(p), p) for p in group["params"]]

    # --------------------------------------------------------------- training
    @contextlib.contextmanager
    def no_sync(self, model: nn.Module) -> Iterator[None]:
        """Accumulate unreduced gradients locally; the next synced backward reduce-scatters their sum."""
        if not isinstance(model, FSDPModule):
            yield
            return
        model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)

    def clip_grad_norm_(self, parameters: Iterable[torch.Tensor], max_norm: float, norm_type: float = 2.0):
        """Clip by the norm over all shards; returns that total norm as a plain tensor (same on every rank)."""
        params = [p for p in parameters if p.grad is not None]
        grads = [cast(torch.Tensor, p.grad) for p in params]  # params: those with a grad
        total = torch.nn.utils.get_total_norm(grads, norm_type=norm_type)
        if hasattr(total, "full_tensor"):
            total = total.full_tensor()
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
        return total

    # ------------------------------------------------------------ state dicts
    def model_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        return ckpt.full_model_state(model)

    def load_model_state_dict(self, model: nn.Module, state_dict: dict[str, torch.Tensor]) -> None:
        ckpt.load_full_model_state(model, state_dict)

    def optimizer_state_dict(self, optimizer: Any, model: nn.Module | None) -> dict[str, Any]:
        return ckpt.full_optimizer_state(self._model_for(optimizer, model), optimizer)

    def load_optimizer_state_dict(
        self, optimizer: Any, model: nn.Module | None, state_dict: dict[str, Any]
    ) -> None:
        ckpt.load_full_optimizer_state(self._model_for(optimizer, model), optimizer, state_dict)

    def _model_for(self, optimizer: Any, model: nn.Module | None) -> nn.Module:
        if model is None:
            raise AcceleratorError("An FSDP optimizer state dict needs its model; prepare the model first.")
        return model

    def save_training_state(
        self, folder: Path, models: list[nn.Module], optimizers: list[Any], writer: Any = None
    ) -> None:
        writer = writer or ImmediateWriter()
        if self.fsdp.fsdp_state_dict_type == "SHARDED_STATE_DICT":
            ckpt.save_sharded(folder, models, optimizers, writer=writer)
            return
        states = [ckpt.full_model_state(m) for m in models]
        opt_states = [ckpt.full_optimizer_state(ckpt.model_of(o, models), o) for o in optimizers]
        if self.state.is_main_process:
            for i, state in enumerate(states):
                writer.torch_save(state, folder / f"model_{i}.bin")
            for i, state in enumerate(opt_states):
                writer.torch_save(state, folder / f"optimizer_{i}.bin")

    def load_training_state(self, folder: Path, models: list[nn.Module], optimizers: list[Any]) -> None:
        if ckpt.is_sharded_checkpoint(folder):
            ckpt.load_sharded(folder, models, optimizers)
            return
        for i, model in enumerate(models):
            state = torch.load(folder / f"model_{i}.bin", map_location="cpu", weights_only=True)
            ckpt.load_full_model_state(model, state)
        for i, optimizer in enumerate(optimizers):
            state = torch.load(folder / f"optimizer_{i}.bin", map_location="cpu", weights_only=True)
            ckpt.load_full_optimizer_state(ckpt.model_of(optimizer, models), optimizer, state)

    @property
    def saves_on_every_rank(self) -> bool:
        return self.fsdp.fsdp_state_dict_type == "SHARDED_STATE_DICT"


def _broadcast_from_rank0(model: nn.Module) -> None:
    """Every rank starts from rank 0's weights and buffers (as DDP does), before sharding."""
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            dist.broadcast(tensor.data, src=0)


def _checkpoint_activations(layers: list[nn.Module]) -> None:
    if not layers:
        raise ConfigError(
            "fsdp_config.fsdp_activation_checkpointing=True recomputes the wrapped layers, but no layer is "
            "wrapped; set fsdp_transformer_layer_cls_to_wrap (e.g. 'TransformerEncoderLayer')."
        )
    from torch.distributed._composable import checkpoint

    for layer in layers:
        checkpoint(layer)


def _sharded_scaler(scaler: torch.amp.GradScaler) -> torch.amp.GradScaler:
    """fp16: a grad scaler whose inf/NaN check agrees over all ranks (each sees only its shard)."""
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    settings = ("device", "init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled")
    return ShardedGradScaler(**{name: getattr(scaler, f"_{name}") for name in settings})


def _report_inert_settings(state: Any, fsdp: Any) -> None:
    """FSDP1-only settings have no FSDP2 counterpart: say so instead of ignoring them silently."""
    inert = []
    if fsdp.fsdp_version == 1:
        inert.append("fsdp_version=1 (FSDP2 is used)")
    if fsdp.fsdp_forward_prefetch:
        inert.append("fsdp_forward_prefetch (FSDP2 prefetches the next layer itself)")
    if fsdp.fsdp_backward_prefetch not in (None, "BACKWARD_PRE"):
        inert.append(
            f"fsdp_backward_prefetch={fsdp.fsdp_backward_prefetch} (FSDP2 prefetches in backward itself)"
        )
    if not fsdp.fsdp_use_orig_params:
        inert.append("fsdp_use_orig_params=False (FSDP2 always keeps the original parameters)")
    if inert:
        _note(state, "FSDP settings without effect under FSDP2: " + "; ".join(inert) + ".")
