"""Accelerator: HuggingFace Accelerate's training API, as a thin facade over strategy objects.

`Accelerator()` with no arguments reads the launch config from the environment (set by
notebook_launch, the CLI, or nothing at all for a plain single process); explicit arguments win.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from ..config import LaunchConfig, config_from_env
from ..config.enums import DistributedType
from ..errors import AcceleratorError, ConfigError
from . import ops
from .data import DataLoaderShard, GradientState
from .kwargs import (
    AutocastKwargs,
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
)
from .precision import Precision
from .process_api import ProcessAPI
from .rng_sync import RNGSyncedLoader, check_rng_types
from .saving_api import SavingAPI
from .seed import set_seed
from .state import get_state
from .strategies import strategy_class
from .tracking_api import TrackingAPI
from .wrappers import AcceleratedOptimizer, AcceleratedScheduler


class Accelerator(TrackingAPI, SavingAPI, ProcessAPI):
    """Prepare model/optimizer/data for the launch's strategy and precision; same API as Accelerate."""

    def __init__(
        self,
        device_placement: bool = True,
        split_batches: bool = False,
        mixed_precision: str | None = None,
        gradient_accumulation_steps: int | None = None,
        cpu: bool = False,
        even_batches: bool = True,
        step_scheduler_with_optimizer: bool = True,
        project_dir: str | os.PathLike[str] | None = None,
        kwargs_handlers: list[Any] | None = None,
        log_with: Any = None,
        rng_types: Any = None,
        dataloader_config: Any = None,
    ) -> None:
        self.config = _resolve_config(mixed_precision, gradient_accumulation_steps, cpu)
        handlers = _index_handlers(kwargs_handlers or [])
        pg = handlers.get(InitProcessGroupKwargs)
        self.state = get_state(self.config, cpu=cpu, **(pg.to_kwargs() if pg else {}))
        self.rng_types = check_rng_types(rng_types, self.state.device)
        if dataloader_config is not None:
            split_batches = getattr(dataloader_config, "split_batches", split_batches)
            even_batches = getattr(dataloader_config, "even_batches", even_batches)
        self.device_placement = device_placement
        self.split_batches = split_batches
        self.even_batches = even_batches
        self.step_scheduler_with_optimizer = step_scheduler_with_optimizer
        self.project_dir = str(project_dir) if project_dir is not None else None
        self.save_iteration = 0
        self._init_tracking(log_with)
        self.gradient_state = GradientState(num_steps=self.config.gradient_accumulation_steps)
        self._step = 0
        scaler = handlers.get(GradScalerKwargs)
        autocast = handlers.get(AutocastKwargs)
        self.precision = Precision(
            self.config.mixed_precision,
            self.state.device,
            scaler_kwargs=scaler.to_kwargs() if scaler else None,
            autocast_kwargs=autocast.to_kwargs() if autocast else None,
        )
        ddp = handlers.get(DistributedDataParallelKwargs)
        self._distributed_type = _resolve_distributed_type(self.config, self.state)
        self.strategy = strategy_class(self._distributed_type.value)(
            self.state,
            self.config,
            self.precision,
            ddp_kwargs=ddp.to_kwargs() if ddp else None,
            gradient_state=self.gradient_state,
        )
        self._models: list[nn.Module] = []
        self._optimizers: list[AcceleratedOptimizer] = []
        self._schedulers: list[AcceleratedScheduler] = []
        self._dataloaders: list[DataLoaderShard] = []
        self._custom_objects: list[Any] = []
        self._prepared_ids: set[int] = set()
        if self.config.seed is not None:
            set_seed(self.config.seed)

    # ------------------------------------------------------------ properties
    @property
    def distributed_type(self) -> DistributedType:
        return self._distributed_type

    @property
    def mixed_precision(self) -> str:
        return self.config.mixed_precision

    @property
    def gradient_accumulation_steps(self) -> int:
        return self.gradient_state.num_steps

    @gradient_accumulation_steps.setter
    def gradient_accumulation_steps(self, steps: int) -> None:
        self.gradient_state.num_steps = steps

    @property
    def sync_gradients(self) -> bool:
        return self.gradient_state.sync_gradients

    @property
    def optimizer_step_was_skipped(self) -> bool:
        """True when the last optimizer step was skipped (fp16 overflow); schedulers did not step."""
        return any(opt.step_was_skipped for opt in self._optimizers)

    @property
    def scaler(self) -> torch.amp.GradScaler | None:
        return self.precision.scaler

    # --------------------------------------------------------------- prepare
    def prepare(self, *args: Any, device_placement: list[bool] | None = None) -> Any:
        """Wrap models, optimizers, data loaders, schedulers (any order); other objects pass through."""
        if device_placement is not None and len(device_placement) != len(args):
            raise AcceleratorError(
                f"device_placement has {len(device_placement)} entries for {len(args)} objects; give one per object."
            )
        placements = device_placement or [self.device_placement] * len(args)
        for obj in args:
            if id(obj) in self._prepared_ids:
                raise AcceleratorError(
                    f"{type(obj).__name__} was already prepared by this Accelerator; call prepare() once per "
                    "object and use the returned one."
                )
        args = tuple(self.strategy.prepare_together(list(args)))  # e.g. DeepSpeed builds its engine here
        result: list[Any] = list(args)
        order = (nn.Module, torch.optim.Optimizer, DataLoader, _is_scheduler)
        for kind in order:
            for i, obj in enumerate(args):
                if _matches(obj, kind):
                    result[i] = self._prepare_one(obj, placements[i])
        return result[0] if len(result) == 1 else tuple(result)

    def _prepare_one(self, obj: Any, placement: bool) -> Any:
        if isinstance(obj, nn.Module):
            return self.prepare_model(obj, device_placement=placement)
        if isinstance(obj, torch.optim.Optimizer):
            return self.prepare_optimizer(obj)
        if isinstance(obj, DataLoader):
            return self.prepare_data_loader(obj, device_placement=placement)
        return self.prepare_scheduler(obj)

    def prepare_model(
        self, model: nn.Module, device_placement: bool | None = None, evaluation_mode: bool = False
    ):
        """Place and wrap one model (DDP, FSDP, ...); a module without trainable weights is only placed."""
        if id(model) in self._prepared_ids:
            raise AcceleratorError(
                f"{type(model).__name__} was already prepared; use the object prepare() returned."
            )
        placement = self.device_placement if device_placement is None else device_placement
        self._prepared_ids.add(id(model))
        trainable = any(p.requires_grad for p in model.parameters())
        if not trainable or evaluation_mode:
            model = model.to(self.device) if placement else model
            self.precision.wrap_forward(model)
        else:
            model = self.strategy.wrap_model(model, device_placement=placement)
            self._models.append(model)
        self._prepared_ids.add(id(model))
        return model

    def prepare_optimizer(self, optimizer: torch.optim.Optimizer, device_placement: bool | None = None):
        if id(optimizer) in self._prepared_ids:
            raise AcceleratorError("This optimizer was already prepared; use the object prepare() returned.")
        self._prepared_ids.add(id(optimizer))
        inner = self.strategy.prepare_optimizer(optimizer, self._models)
        wrapped = AcceleratedOptimizer(inner, self.precision, self.gradient_state)
        self._optimizers.append(wrapped)
        self._prepared_ids.add(id(wrapped))
        return wrapped

    def prepare_scheduler(self, scheduler: Any):
        self._prepared_ids.add(id(scheduler))
        mine = [o for o in self._optimizers if o.optimizer is scheduler.optimizer or o is scheduler.optimizer]
        wrapped = AcceleratedScheduler(
            scheduler,
            mine or self._optimizers,
            self.gradient_state,
            num_processes=self.num_processes,
            split_batches=self.split_batches,
            step_with_optimizer=self.step_scheduler_with_optimizer,
        )
        self._schedulers.append(wrapped)
        return wrapped

    def prepare_data_loader(
        self, data_loader: DataLoader, device_placement: bool | None = None
    ) -> DataLoaderShard:
        """Shard a DataLoader over the processes, shuffle alike on every rank, move batches to device."""
        self._prepared_ids.add(id(data_loader))
        placement = self.device_placement if device_placement is None else device_placement
        seed = self.config.seed if self.config.seed is not None else torch.initial_seed() % 2**31
        seed = ops.broadcast_object_list([seed])[0]
        synced = {"rng_types": self.rng_types, "rng_device": self.device} if self.rng_types else {}
        loader = (RNGSyncedLoader if synced else DataLoaderShard)(
            data_loader,
            rank=self.process_index,
            world_size=self.num_processes,
            device=self.device if placement else None,
            gradient_state=self.gradient_state,
            split_batches=self.split_batches,
            even_batches=self.even_batches,
            seed=int(seed),
            **synced,
        )
        self._dataloaders.append(loader)
        return loader

    # -------------------------------------------------------------- training
    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """loss.backward() with accumulation scaling, the fp16 loss scaler and the strategy's sync."""
        if not self._models:
            raise AcceleratorError(
                "accelerator.backward() was called before any model was prepared; call "
                "`model, optimizer, ... = accelerator.prepare(model, optimizer, ...)` first."
            )
        if self.gradient_state.num_steps > 1:
            loss = loss / self.gradient_state.num_steps
        self.strategy.backward(loss, **kwargs)

    def _do_sync(self) -> None:
        state = self.gradient_state
        if state.end_of_dataloader:
            self._step = 0
            state.sync_gradients = True
        else:
            self._step += 1
            state.sync_gradients = self._step % state.num_steps == 0

    @contextlib.contextmanager
    def accumulate(self, *models: nn.Module) -> Iterator[None]:
        """Accumulate gradients over gradient_accumulation_steps batches; sync and step on the last."""
        self._do_sync()
        with contextlib.ExitStack() as stack:
            if not self.gradient_state.sync_gradients:
                for model in models or self._models:
                    stack.enter_context(self.strategy.no_sync(model))
            yield

    @contextlib.contextmanager
    def no_sync(self, model: nn.Module) -> Iterator[None]:
        with self.strategy.no_sync(model):
            yield

    @contextlib.contextmanager
    def autocast(self, autocast_handler: AutocastKwargs | None = None) -> Iterator[None]:
        overrides = autocast_handler.to_kwargs() if autocast_handler else {}
        with self.precision.autocast(**overrides):
            yield

    def unscale_gradients(self, optimizer: Any = None) -> None:
        for opt in [optimizer] if optimizer is not None else self._optimizers:
            self.precision.unscale_(getattr(opt, "optimizer", opt))

    def clip_grad_norm_(self, parameters: Iterable[torch.Tensor], max_norm: float, norm_type: float = 2.0):
        """Clip the (unscaled, synchronised) gradient norm; returns the total norm before clipping."""
        self.unscale_gradients()
        return self.strategy.clip_grad_norm_(parameters, max_norm, norm_type)

    def clip_grad_value_(self, parameters: Iterable[torch.Tensor], clip_value: float) -> None:
        self.unscale_gradients()
        torch.nn.utils.clip_grad_value_(list(parameters), clip_value)

    # --------------------------------------------------------------- metrics
    def gather_for_metrics(self, input_data: Any, use_gather_object: bool = False) -> Any:
        """Gather for evaluation, dropping the samples even_batches repeated to fill the last round."""
        tensors_only = _all_tensors(input_data)
        data = (
            ops.gather(input_data)
            if tensors_only and not use_gather_object
            else ops.gather_object(input_data)
        )
        state = self.gradient_state
        if not state.end_of_dataloader or state.remainder < 0:
            return data
        keep = state.remainder
        if isinstance(data, list) and not tensors_only:
            return data[:keep]
        return ops.recursively_apply(lambda t: t[:keep], data)


def _resolve_config(mixed_precision: str | None, accumulation: int | None, cpu: bool) -> LaunchConfig:
    base = config_from_env() or LaunchConfig()
    overrides: dict[str, Any] = {
        "mixed_precision": mixed_precision,
        "gradient_accumulation_steps": accumulation,
    }
    if cpu:
        overrides["use_cpu"] = True
    for name, value in (("mixed_precision", mixed_precision), ("gradient_accumulation_steps", accumulation)):
        if value is not None and not isinstance(value, (str, int)):
            raise ConfigError(f"{name}={value!r} has the wrong type.")
    return base.replace(**overrides)


def _resolve_distributed_type(config: LaunchConfig, state: Any) -> DistributedType:
    if config.distributed_type in ("FSDP", "DEEPSPEED"):
        return DistributedType(config.distributed_type)
    if not state.is_distributed:
        return DistributedType.NO
    if config.distributed_type == "NO":
        raise AcceleratorError(
            f"The launch config says distributed_type='NO' (one process), but this process is one of "
            f"{state.world_size} (WORLD_SIZE); launch one process, or use MULTI_GPU / MULTI_CPU for several."
        )
    return DistributedType.MULTI_GPU if state.device.type == "cuda" else DistributedType.MULTI_CPU


def _index_handlers(handlers: list[Any]) -> dict[type, Any]:
    known = (DistributedDataParallelKwargs, GradScalerKwargs, AutocastKwargs, InitProcessGroupKwargs)
    out: dict[type, Any] = {}
    for handler in handlers:
        kind = next((k for k in known if isinstance(handler, k)), None)
        if kind is None:
            raise AcceleratorError(
                f"Unsupported kwargs handler {handler!r}; use one of {[k.__name__ for k in known]}."
            )
        if kind in out:
            raise AcceleratorError(f"Two {kind.__name__} handlers were given; pass each kind once.")
        out[kind] = handler
    return out


def _is_scheduler(obj: Any) -> bool:
    return isinstance(obj, torch.optim.lr_scheduler.LRScheduler) or (
        hasattr(obj, "step") and isinstance(getattr(obj, "optimizer", None), torch.optim.Optimizer)
    )


def _matches(obj: Any, kind: Any) -> bool:
    if kind is _is_scheduler:
        return not isinstance(obj, (nn.Module, torch.optim.Optimizer, DataLoader)) and _is_scheduler(obj)
    return isinstance(obj, kind)


def _all_tensors(data: Any) -> bool:
    """True when data holds at least one tensor and nothing else (inside lists, tuples, dicts)."""
    leaves = list(_leaves(data))
    return bool(leaves) and all(isinstance(leaf, torch.Tensor) for leaf in leaves)


def _leaves(data: Any) -> Iterator[Any]:
    if isinstance(data, Mapping):
        for value in data.values():
            yield from _leaves(value)
    elif isinstance(data, (list, tuple)):
        for value in data:
            yield from _leaves(value)
    else:
        yield data
