"""DeepSpeed (ZeRO stages 0-3): `prepare` builds one engine from model + optimizer (+ scheduler).

- `prepare(model, optimizer, loader, scheduler)` in one call: the engine is built from the model and
  the optimizer (the loader's batch size fills "auto" batch sizes); the model returned is the
  engine, the optimizer returned is a handle whose step()/zero_grad() do nothing, because
- `accelerator.backward(loss)` runs `engine.backward` and `engine.step()`: the engine reduces,
  clips (gradient_clipping from the config), steps and zeroes on the accumulation boundary, which
  is the Accelerator's `sync_gradients` (so `accumulate()` works as with DDP).
- A scheduler you pass stays yours and advances after real steps (AcceleratedScheduler); a
  "scheduler" section in the JSON file makes the engine own and step one instead.
- `save_state` / `load_state` use the engine's checkpoints (every rank writes its ZeRO partition);
  `get_state_dict` / `save_model` gather the full weights (ZeRO-3: the 16-bit weights).

fp16 loss scaling is DeepSpeed's own, so the Accelerator's GradScaler is switched off here.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn
from torch.utils.data import DataLoader

from ....errors import AcceleratorError, ConfigError, install_hint
from ..base import Strategy
from ..process_group import ensure_process_group
from .config import EngineConfig, build_engine_config
from .memory import share_master_partitions
from .offload import optimizer_for_offload
from .sharded_init import materialize_for_engine, sharded_init_context
from .zero3_init import register_with_transformers

CHECKPOINT_TAG = "deepspeed"


def import_deepspeed() -> Any:
    """The deepspeed module, or a ConfigError that names the install command."""
    try:
        return importlib.import_module("deepspeed")
    except ImportError as exc:
        raise ConfigError(
            "distributed_type='DEEPSPEED' needs the deepspeed package, which cannot be imported here "
            f"({exc}); run {install_hint('deepspeed', 'deepspeed')}, "
            "or choose another distributed_type such as 'FSDP'."
        ) from None


class EngineOptimizer(torch.optim.Optimizer):
    """The optimizer prepare() hands back under DeepSpeed: the engine steps inside backward(), so
    step() and zero_grad() do nothing; param_groups are the live ones (a scheduler's lr reaches the engine)."""

    def __init__(self, engine: Any, user_optimizer: torch.optim.Optimizer | None) -> None:
        self.engine = engine
        self.optimizer = user_optimizer if user_optimizer is not None else engine.optimizer

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    @property
    def state(self):
        return self.optimizer.state

    @property
    def defaults(self):
        return getattr(self.optimizer, "defaults", {})

    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        """Stepped by accelerator.backward() already."""

    @property
    def step_was_skipped(self) -> bool:
        """True when the engine's last boundary step did not update the weights (fp16 overflow), as
        Accelerate's DeepSpeed optimizer wrapper reports: the Accelerator's schedulers then do not step."""
        applied = getattr(self.engine, "was_step_applied", None)
        return applied is not None and not applied()

    def zero_grad(self, set_to_none: bool = True) -> None:
        """The engine zeroes gradients after its step."""

    def state_dict(self) -> dict[str, Any]:
        """This rank's partition of the optimizer state (use save_state for a whole checkpoint)."""
        return self.engine.optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.engine.optimizer.load_state_dict(state_dict)

    def __repr__(self) -> str:
        return f"EngineOptimizer({type(self.engine.optimizer).__name__})"


class DeepSpeedStrategy(Strategy):
    name = "DEEPSPEED"
    shards_weights = True

    def __init__(self, state: Any, config: Any, precision: Any, **kwargs: Any) -> None:
        super().__init__(state, config, precision, **kwargs)
        self.deepspeed = import_deepspeed()
        if state.device.type == "cpu":
            _use_cpu_accelerator()  # a CPU run on a GPU machine (use_cpu) must not get DeepSpeed's CUDA side
        if not config.debug:
            _quiet_known_noise()
        ensure_process_group(state)
        precision.scaler = None
        self.engine: Any = None
        self.engine_config: EngineConfig | None = None
        self._hf_deepspeed_config = register_with_transformers(config, state.world_size)

    # ---------------------------------------------------------------- prepare
    def prepare_together(self, objects: list[Any]) -> list[Any]:
        models = [
            o for o in objects if isinstance(o, nn.Module) and any(p.requires_grad for p in o.parameters())
        ]
        if not models:
            return objects
        if len(models) > 1 or self.engine is not None:
            raise AcceleratorError(
                "DeepSpeed trains one model per Accelerator; prepare a single model (with its optimizer), or "
                "use distributed_type='FSDP' for several models."
            )
        optimizers = [o for o in objects if isinstance(o, torch.optim.Optimizer)]
        schedulers = [o for o in objects if _is_scheduler(o)]
        loaders = [o for o in objects if isinstance(o, DataLoader)]
        if len(optimizers) > 1:
            raise AcceleratorError(
                "DeepSpeed takes one optimizer for its model; pass exactly one to prepare()."
            )
        optimizer = optimizers[0] if optimizers else None
        micro = loaders[0].batch_size if loaders else None
        engine = self._build_engine(models[0], optimizer, micro)
        handle = EngineOptimizer(engine, optimizer)
        swapped = []
        for obj in objects:
            if obj is models[0]:
                swapped.append(engine)
            elif obj is optimizer:
                swapped.append(handle)
            else:
                swapped.append(obj)
        engine_config = cast(EngineConfig, self.engine_config)  # set by _build_engine
        if schedulers and engine_config.has_scheduler:
            raise ConfigError(
                f"{engine_config.source} has a 'scheduler' section and a scheduler was also passed to "
                "prepare(); remove one of them."
            )
        return swapped

    def _build_engine(self, model: nn.Module, optimizer: torch.optim.Optimizer | None, micro: int | None):
        _refuse_fsdp(model)
        engine_config = build_engine_config(
            self.config,
            micro_batch_size=micro,
            world_size=self.state.world_size,
            client_optimizer=optimizer is not None,
            largest_parameter=max((_numel(p) for p in model.parameters()), default=0),
        )
        if optimizer is None and not engine_config.has_optimizer:
            raise AcceleratorError(
                "DeepSpeed builds its engine from the model and its optimizer together: call "
                "`model, optimizer, ... = accelerator.prepare(model, optimizer, ...)` in one call (or describe "
                "the optimizer in the DeepSpeed JSON file)."
            )
        if self.gradient_state is not None:
            self.gradient_state.num_steps = engine_config.gradient_accumulation_steps
        model = self.convert_precision(model)
        note = materialize_for_engine(
            model,
            optimizer,
            deepspeed=self.deepspeed,
            engine_config=engine_config,
            device=self.state.device,
            zero3_init_flag=bool(self.config.deepspeed_config.zero3_init_flag),
        )
        if note and self.state.is_main_process:
            print(f"notebook_launcher: {note}", flush=True)
        self.precision.wrap_forward(model)
        engine, *_ = self.deepspeed.initialize(
            model=model,
            optimizer=optimizer_for_offload(optimizer, engine_config.config),
            model_parameters=None if optimizer is not None else model.parameters(),
            config=engine_config.config,
            dist_init_required=False,
        )
        share_master_partitions(engine.optimizer)  # fp32 ZeRO-3: one copy of each partition, not two
        self.engine, self.engine_config = engine, engine_config
        return engine

    def sharded_init(self) -> Any:
        """ZeRO-3: zero.Init with zero3_init_flag, else rank 0 real and the others on meta."""
        engine_config = build_engine_config(
            self.config, micro_batch_size=None, world_size=self.state.world_size, client_optimizer=False
        )
        return sharded_init_context(
            self.deepspeed,
            engine_config,
            self.state.is_main_process,
            bool(self.config.deepspeed_config.zero3_init_flag),
        )

    def wrap_model(self, model: nn.Module, *, device_placement: bool = True) -> nn.Module:
        if model is self.engine:
            return model
        if self.engine is None:  # prepare_model(model) alone: possible when the file has an optimizer
            return self._build_engine(model, None, None)
        raise AcceleratorError("DeepSpeed trains one model per Accelerator; this one was prepared already.")

    def prepare_optimizer(self, optimizer: torch.optim.Optimizer, models: list[nn.Module]) -> Any:
        if isinstance(optimizer, EngineOptimizer):
            return optimizer
        raise AcceleratorError(
            "Under DeepSpeed the optimizer is built into the engine with its model: pass both to one "
            "`accelerator.prepare(model, optimizer, ...)` call."
        )

    def unwrap_model(self, model: nn.Module) -> nn.Module:
        return super().unwrap_model(getattr(model, "module", model) if model is self.engine else model)

    # --------------------------------------------------------------- training
    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """Backward through the engine, then its step (which acts on the accumulation boundary only).

        The Accelerator already divided the loss by the accumulation steps, hence scale_wrt_gas=False."""
        engine = self._engine()
        boundary = self.gradient_state.sync_gradients if self.gradient_state is not None else True
        engine.set_gradient_accumulation_boundary(boundary)
        engine.backward(loss, scale_wrt_gas=False, **kwargs)
        engine.step()

    @contextlib.contextmanager
    def no_sync(self, model: nn.Module) -> Iterator[None]:
        """Nothing to do: the engine reduces on the boundary that backward() sets."""
        yield

    def clip_grad_norm_(self, parameters: Iterable[torch.Tensor], max_norm: float, norm_type: float = 2.0):
        """The engine clipped in its step (gradient_clipping from the config); returns the norm it saw."""
        engine = self._engine()
        # What the engine really uses: a JSON file without the key gets DeepSpeed's default, 1.0.
        configured = float(engine.gradient_clipping() or 0.0)
        if abs(configured - float(max_norm)) > 1e-12:
            raise AcceleratorError(
                f"clip_grad_norm_(max_norm={max_norm}) under DeepSpeed: the engine clips inside its step with "
                f"gradient_clipping={configured} from {cast(EngineConfig, self.engine_config).source}. Set "
                f'deepspeed_config.gradient_clipping={max_norm} (or "gradient_clipping": {max_norm} in the file).'
            )
        norm = engine.get_global_grad_norm()
        return torch.as_tensor(0.0 if norm is None else float(norm))

    def _engine(self) -> Any:
        if self.engine is None:
            raise AcceleratorError(
                "No DeepSpeed engine yet: call accelerator.prepare(model, optimizer, ...) first."
            )
        return self.engine

    # ------------------------------------------------------------ state dicts
    def model_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """Full weights on every rank (a collective under ZeRO-3, which gathers the 16-bit weights)."""
        module = self.unwrap_model(model)
        with self._gathered(module, modifier_rank=None, purpose="save_model / get_state_dict"):
            return {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}

    def load_model_state_dict(self, model: nn.Module, state_dict: dict[str, torch.Tensor]) -> None:
        module = self.unwrap_model(model)
        with self._gathered(module, modifier_rank=0, purpose="load_model_state_dict"):
            module.load_state_dict(state_dict)
        refresh = getattr(self._engine().optimizer, "refresh_fp32_params", None)
        if refresh is not None:
            refresh()  # the optimizer's fp32 master copy follows the loaded weights

    def _gathered(self, module: nn.Module, *, modifier_rank: int | None, purpose: str):
        if self.engine_config is None or self.engine_config.zero_stage != 3:
            return contextlib.nullcontext()
        if not self.config.deepspeed_config.zero3_save_16bit_model and purpose.startswith("save"):
            raise AcceleratorError(
                f"{purpose} under ZeRO-3 gathers the 16-bit weights, which deepspeed_config.zero3_save_16bit_model="
                "False turns off; set it to True, or use save_state() and DeepSpeed's zero_to_fp32.py."
            )
        return self.deepspeed.zero.GatheredParameters(list(module.parameters()), modifier_rank=modifier_rank)

    def optimizer_state_dict(self, optimizer: Any, model: nn.Module | None) -> dict[str, Any]:
        return self._engine().optimizer.state_dict()

    def load_optimizer_state_dict(
        self, optimizer: Any, model: nn.Module | None, state_dict: dict[str, Any]
    ) -> None:
        self._engine().optimizer.load_state_dict(state_dict)

    @property
    def supports_async_save(self) -> bool:
        """No: the engine's save_checkpoint writes from its own partitioned buffers, with collectives,
        and has no staging step to hand the write to a thread."""
        return False

    def save_training_state(
        self, folder: Path, models: list[nn.Module], optimizers: list[Any], writer: Any = None
    ) -> None:
        """The engine's checkpoint: module, ZeRO-partitioned optimizer state and its scheduler, per rank."""
        self._engine().save_checkpoint(str(folder), tag=CHECKPOINT_TAG, save_latest=False)

    def load_training_state(self, folder: Path, models: list[nn.Module], optimizers: list[Any]) -> None:
        if not (folder / CHECKPOINT_TAG).is_dir():
            raise AcceleratorError(
                f"{str(folder)!r} holds no DeepSpeed checkpoint (no {CHECKPOINT_TAG}/ folder); load a folder that "
                "save_state() wrote under distributed_type='DEEPSPEED'."
            )
        path, _ = self._engine().load_checkpoint(str(folder), tag=CHECKPOINT_TAG)
        if path is None:
            raise AcceleratorError(f"DeepSpeed could not load the checkpoint in {str(folder)!r}.")

    @property
    def saves_on_every_rank(self) -> bool:
        return True


def _use_cpu_accelerator() -> None:
    """Point DeepSpeed at its CPU accelerator (module state, not os.environ) unless it already is."""
    from deepspeed.accelerator import real_accelerator

    current = real_accelerator.ds_accelerator
    if current is None or current.device_name() != "cpu":
        from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator

        real_accelerator.set_accelerator(CPU_Accelerator())


def _refuse_fsdp(model: nn.Module) -> None:
    from torch.distributed.fsdp import FSDPModule

    if isinstance(model, FSDPModule) or any(isinstance(m, FSDPModule) for m in model.modules()):
        raise AcceleratorError(
            f"{type(model).__name__} is already sharded with FSDP (fully_shard); FSDP and DeepSpeed cannot be "
            "combined. Pass the plain model, or use distributed_type='FSDP' without DeepSpeed."
        )


def _numel(param: torch.Tensor) -> int:
    """Elements of a parameter, also when zero.Init has partitioned it already."""
    return int(getattr(param, "ds_numel", param.numel()))


def _is_scheduler(obj: Any) -> bool:
    if isinstance(obj, (nn.Module, torch.optim.Optimizer, DataLoader)):
        return False
    return hasattr(obj, "step") and isinstance(getattr(obj, "optimizer", None), torch.optim.Optimizer)


class _DropMessages(logging.Filter):
    def __init__(self, *fragments: str) -> None:
        super().__init__()
        self.fragments = fragments

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(f in record.getMessage() for f in self.fragments)


def _quiet_known_noise() -> None:
    """In this worker only: DeepSpeed's info lines, the warning about the client optimizer we allow on
    purpose, and torch's deprecation notice for collectives DeepSpeed calls on every step."""
    logger = logging.getLogger("DeepSpeed")
    logger.setLevel(logging.WARNING)
    logger.addFilter(_DropMessages("untested optimizer"))
    warnings.filterwarnings(
        "ignore",
        message=r"`torch\.distributed\.(all_gather_into_tensor|reduce_scatter_tensor)` is deprecated",
        category=FutureWarning,
    )
