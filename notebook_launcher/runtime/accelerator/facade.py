"""Accelerator: HuggingFace Accelerate's training API, as a thin facade over strategy objects.

`Accelerator()` with no arguments reads the launch config from the environment (set by
notebook_launch, the CLI, or nothing at all for a plain single process); explicit arguments win.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, cast

import torch
from torch import nn
from torch.utils.data import DataLoader

from ...errors import AcceleratorError, AcceleratorValueError
from .. import memory_phases, ops
from ..compile import compile_model
from ..data import DataLoaderShard, GradientState
from ..data.stage_batches import StageDataLoader
from ..parallel.api import ParallelismAPI
from ..parallel.mesh import data_rank_and_size
from ..parallel.metrics import gather_by_data_rank
from ..parallel.setup import mesh_and_strategy, plan_parallelism
from ..precision.mixed import Precision
from ..strategies import strategy_class
from ..world import preemption, step_clock
from ..world.rng_sync import check_rng_types
from ..world.seed import set_seed
from ..world.shared_state import AcceleratorState, resolve_distributed_type
from ..world.state import get_state
from ..wrappers import AcceleratedOptimizer, AcceleratedScheduler
from . import settings as accelerator_settings
from .configurations import DataLoaderConfiguration, ProjectConfiguration
from .control_api import ControlAPI
from .kwargs import AutocastKwargs, DistributedDataParallelKwargs, GradScalerKwargs, InitProcessGroupKwargs
from .process_api import ProcessAPI
from .saving_api import SavingAPI
from .settings import _NOT_GIVEN
from .sharding_api import ShardingAPI
from .tracking_api import TrackingAPI
from .views import SettingsView


class Accelerator(TrackingAPI, SavingAPI, ControlAPI, SettingsView, ProcessAPI, ShardingAPI, ParallelismAPI):
    """Prepare model/optimizer/data for the launch's strategy and precision; Accelerate 1.x's API.

    Arguments are Accelerate's (dataloader_config, project_config, gradient_accumulation_plugin,
    fsdp_plugin, deepspeed_plugin, dynamo_backend/dynamo_plugin, rng_types, kwargs_handlers, ...);
    what is not given comes from the launch (notebook_launch, our CLI, or `accelerate launch`).
    """

    step: int  # gradient accumulation's micro-step counter (also restored by load_state)

    def __init__(
        self,
        device_placement: bool = True,
        split_batches: bool = _NOT_GIVEN,
        mixed_precision: str | None = None,
        gradient_accumulation_steps: int | None = None,
        cpu: bool = False,
        dataloader_config: DataLoaderConfiguration | None = None,
        deepspeed_plugin: Any = None,
        fsdp_plugin: Any = None,
        torch_tp_plugin: Any = None,
        megatron_lm_plugin: Any = None,
        rng_types: list[str] | None = None,
        log_with: Any = None,
        project_dir: str | os.PathLike[str] | None = None,
        project_config: ProjectConfiguration | None = None,
        gradient_accumulation_plugin: Any = None,
        step_scheduler_with_optimizer: bool = True,
        kwargs_handlers: list[Any] | None = None,
        dynamo_backend: Any = None,
        dynamo_plugin: Any = None,
        deepspeed_plugins: Any = None,
        parallelism_config: Any = None,
        **removed: Any,
    ) -> None:
        accelerator_settings.check_removed_arguments(removed, Accelerator.__init__)
        if deepspeed_plugin is not None and deepspeed_plugins is not None:
            raise AcceleratorValueError("Accelerator() got deepspeed_plugin and deepspeed_plugins; pass one.")
        settings = accelerator_settings.resolve(
            split_batches=split_batches,
            mixed_precision=mixed_precision,
            gradient_accumulation_steps=gradient_accumulation_steps,
            cpu=cpu,
            dataloader_config=dataloader_config,
            deepspeed_plugin=deepspeed_plugin if deepspeed_plugin is not None else deepspeed_plugins,
            fsdp_plugin=fsdp_plugin,
            project_dir=project_dir,
            project_config=project_config,
            gradient_accumulation_plugin=gradient_accumulation_plugin,
            kwargs_handlers=kwargs_handlers,
            dynamo_backend=dynamo_backend,
            dynamo_plugin=dynamo_plugin,
            unsupported=dict(
                torch_tp_plugin=torch_tp_plugin,
                megatron_lm_plugin=megatron_lm_plugin,
            ),
        )
        self._parallelism, self.config = plan_parallelism(parallelism_config, settings.config)
        self.handlers = settings.handlers
        self.dataloader_config = settings.dataloader_config
        self.project_configuration = settings.project_configuration
        pg = self.handlers.get(InitProcessGroupKwargs)
        process = get_state(self.config, cpu=cpu, **(pg.to_kwargs() if pg else {}))
        self.rng_types = check_rng_types(rng_types, process.device)  # what each epoch start synchronises
        self._distributed_type = resolve_distributed_type(self.config, process)
        self.state = AcceleratorState.for_accelerator(  # type: ignore[assignment]  # ProcessState's fields and more
            process, self.config, self._distributed_type, settings.plugins
        )
        self._init_tracking(log_with)
        self.device_placement = device_placement
        self.step_scheduler_with_optimizer = step_scheduler_with_optimizer
        self.gradient_state = GradientState(settings.gradient_accumulation_plugin)
        self.step = 0
        self.flag_tensor = None
        scaler = self.handlers.get(GradScalerKwargs)
        autocast = self.handlers.get(AutocastKwargs)
        self.precision = Precision(
            self.config.mixed_precision,
            process.device,
            scaler_kwargs=scaler.to_kwargs() if scaler else None,
            autocast_kwargs=autocast.to_kwargs() if autocast else None,
        )
        ddp = self.handlers.get(DistributedDataParallelKwargs)
        self._device_mesh, mesh_strategy = mesh_and_strategy(self._parallelism, process)
        extra = {"parallelism": self._parallelism, "device_mesh": self._device_mesh} if mesh_strategy else {}
        self.strategy = strategy_class(mesh_strategy or self._distributed_type.value)(
            process,
            self.config,
            self.precision,
            ddp_kwargs=ddp.to_kwargs() if ddp else None,
            gradient_state=self.gradient_state,
            **extra,
        )
        memory_phases.strategy_chosen(self.strategy)
        self._models: list[nn.Module] = []
        self._optimizers: list[AcceleratedOptimizer] = []
        self._schedulers: list[AcceleratedScheduler] = []
        self._dataloaders: list[DataLoaderShard] = []
        self._custom_objects: list[Any] = []
        self._prepared_ids: set[int] = set()
        self._save_model_state_pre_hook: OrderedDict[int, Any] = OrderedDict()  # RemovableHandle needs
        self._load_model_state_pre_hook: OrderedDict[int, Any] = OrderedDict()  # a weak-referenceable dict
        if self.config.seed is not None:
            set_seed(self.config.seed)
        step_clock.switch_on_if_watched()  # where each step's time goes, for the launcher's verdict
        preemption.install_handlers_if_asked()  # a worker of `notebook-launcher launch`
        preemption.listen()  # SIGTERM / SIGUSR1 now ask for a graceful stop (accelerator.preempted)

    # --------------------------------------------------------------- prepare
    def prepare(self, *args: Any, device_placement: list[bool] | None = None) -> Any:
        """Wrap models, optimizers, data loaders, schedulers (any order); other objects pass through."""
        if device_placement is not None and len(device_placement) != len(args):
            raise AcceleratorValueError(
                f"device_placement has {len(device_placement)} entries for {len(args)} objects; give one per object."
            )
        placements = device_placement or [self.device_placement] * len(args)
        _ = self.state.distributed_type  # type: ignore[attr-defined]  # a reset state fails here, with the cause
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
        memory_phases.phase_ended()  # the unprepared copies are garbage now
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
    ) -> nn.Module:
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
            model = compile_model(
                model,
                self.config.dynamo_config,
                getattr(getattr(self.state, "dynamo_plugin", None), "options", None),
            )
            self._models.append(model)
            step_clock.watch_model(model)
        self._prepared_ids.add(id(model))
        return model

    def prepare_optimizer(
        self, optimizer: torch.optim.Optimizer, device_placement: bool | None = None
    ) -> AcceleratedOptimizer:
        if id(optimizer) in self._prepared_ids:
            raise AcceleratorError("This optimizer was already prepared; use the object prepare() returned.")
        self._prepared_ids.add(id(optimizer))
        inner = self.strategy.prepare_optimizer(optimizer, self._models)
        wrapped = AcceleratedOptimizer(inner, self.precision, self.gradient_state)
        self._optimizers.append(wrapped)
        self._prepared_ids.add(id(wrapped))
        return wrapped

    def prepare_scheduler(self, scheduler: Any) -> AcceleratedScheduler:
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
        self, data_loader: DataLoader[Any], device_placement: bool | None = None
    ) -> DataLoaderShard:
        """Shard a DataLoader over the processes, shuffle alike on every rank, move batches to device."""
        self._prepared_ids.add(id(data_loader))
        placement = self.device_placement if device_placement is None else device_placement
        seed = self.dataloader_config.data_seed
        if seed is None:
            seed = self.config.seed if self.config.seed is not None else torch.initial_seed() % 2**31
        seed = ops.broadcast_object_list([seed])[0]
        data_rank, data_world = data_rank_and_size(self._parallelism, self.process_index, self.num_processes)
        stage = self.strategy.data_stage()  # a pipeline: only its first and last stages read batches
        loader_class = DataLoaderShard if stage is None else functools.partial(StageDataLoader, stage=stage)
        loader = loader_class(
            data_loader,
            rank=data_rank,  # ranks that differ only in tp/cp read the same batches
            world_size=data_world,
            device=self.device if placement else None,
            gradient_state=self.gradient_state,
            split_batches=self.split_batches,
            even_batches=self.even_batches,
            seed=int(seed),
            dispatch_batches=self.dispatch_batches,
            non_blocking=self.non_blocking,
            rng_types=self.rng_types,
            use_seedable_sampler=self.dataloader_config.use_seedable_sampler,
            data_seed=self.dataloader_config.data_seed,
            process_index=self.process_index,  # dispatch_batches: process 0 alone reads
        )
        loader.periodic_saves = self._periodic_saves()  # ProjectConfiguration.save_every_n_steps
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
        if step_clock.CLOCK.enabled:
            step_clock.CLOCK.backward(lambda: self.strategy.backward(loss, **kwargs))
        else:
            self.strategy.backward(loss, **kwargs)

    def _do_sync(self) -> None:
        state = self.gradient_state
        if state.sync_with_dataloader and state.end_of_dataloader:
            self.step = 0
            state.sync_gradients = True
        else:
            self.step += 1
            state.sync_gradients = self.step % state.num_steps == 0

    @contextlib.contextmanager
    def accumulate(self, *models: nn.Module) -> Iterator[None]:
        """Accumulate gradients over gradient_accumulation_steps batches; sync and step on the last
        (with sync_each_batch, gradients are all-reduced on every batch and only the step waits)."""
        self._do_sync()
        allow_sync = self.gradient_state.sync_gradients or (
            self.use_distributed and self.gradient_state.sync_each_batch
        )
        with contextlib.ExitStack() as stack:
            if not allow_sync:
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

    def clip_grad_norm_(
        self, parameters: Iterable[torch.Tensor], max_norm: float, norm_type: float = 2.0
    ) -> torch.Tensor:
        """Clip the (unscaled, synchronised) gradient norm; returns the total norm before clipping."""
        self.unscale_gradients()
        return cast(torch.Tensor, self.strategy.clip_grad_norm_(parameters, max_norm, norm_type))

    def clip_grad_value_(self, parameters: Iterable[torch.Tensor], clip_value: float) -> None:
        self.unscale_gradients()
        torch.nn.utils.clip_grad_value_(list(parameters), clip_value)

    # --------------------------------------------------------------- metrics
    def gather_for_metrics(self, input_data: Any, use_gather_object: bool = False) -> Any:
        """Gather for evaluation; on a loader's last batch drop the samples even_batches repeated.

        Tensors are concatenated (gather); anything else, or use_gather_object=True, goes through
        gather_object and the list of objects is cut to the real samples.
        """
        use_gather_object = use_gather_object or not _all_tensors(input_data)
        data = gather_by_data_rank(input_data, use_gather_object, self._parallelism, self.num_processes)
        state = self.gradient_state
        if not state.end_of_dataloader or state.remainder <= 0:
            return data
        keep = state.remainder
        if use_gather_object:
            return data[:keep]
        return ops.recursively_apply(lambda t: t[:keep], data)


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
