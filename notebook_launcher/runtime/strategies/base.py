"""The interface every distribution strategy implements; the Accelerator only talks to this.

A strategy decides how a model is wrapped, how gradients are synchronised and how state dicts are
taken. Adding FSDP or DeepSpeed means adding a subclass and a registry entry, nothing else.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

from ...config import LaunchConfig
from ..precision.mixed import Precision
from ..world.state import ProcessState
from .materialize import materialize_whole, rebind_optimizer


class Strategy:
    """Single-device behaviour; distributed strategies override what differs."""

    name = "NO"
    # Whether the model's weights are split across ranks: memory is why the user chose it, so the
    # worker returns large freed blocks to the system from the start (runtime/memory_phases.py).
    shards_weights = False

    def __init__(
        self,
        state: ProcessState,
        config: LaunchConfig,
        precision: Precision,
        *,
        ddp_kwargs: dict[str, Any] | None = None,
        gradient_state: Any = None,
    ) -> None:
        self.state = state
        self.config = config
        self.precision = precision
        self.ddp_kwargs = dict(ddp_kwargs or {})
        # The Accelerator's GradientState (sync_gradients, num_steps); DeepSpeed needs the boundary.
        self.gradient_state = gradient_state
        self._replaced: dict[int, nn.Parameter] = {}  # meta parameters given memory in wrap_model

    # ---------------------------------------------------------------- prepare
    def prepare_together(self, objects: list[Any]) -> list[Any]:
        """See every object of one prepare() call before each is prepared, and swap some if needed.

        A strategy that builds from several objects at once (DeepSpeed's engine from model +
        optimizer + scheduler + the loader's batch size) replaces them here; the default keeps all.
        """
        return objects

    def sharded_init(self) -> contextlib.AbstractContextManager:
        """The context `accelerator.sharded_init()` builds a model in; strategies that shard
        parameters build it on the meta device where they can. Unsharded: an ordinary build."""
        return contextlib.nullcontext()

    def convert_precision(self, model: nn.Module) -> nn.Module:
        """Module conversions a precision mode needs before wrapping (fp8: Linear -> fp8 Linear)."""
        if self.precision.mode == "fp8":
            from ..precision.fp8 import convert_to_fp8

            model = convert_to_fp8(model)
        return model

    # ----------------------------------------------------------------- models
    def wrap_model(self, model: nn.Module, *, device_placement: bool = True) -> nn.Module:
        """Place the model and wrap it for this strategy; returns what training should call."""
        self.materialize(model)
        if device_placement:
            model = model.to(self.state.device)
        model = self.convert_precision(model)
        self.precision.wrap_forward(model)
        return model

    def unwrap_model(self, model: nn.Module) -> nn.Module:
        """The user's own module inside whatever wrappers this strategy (or torch.compile) added."""
        while True:
            if hasattr(model, "_orig_mod"):  # torch.compile
                model = cast(nn.Module, model._orig_mod)
            elif isinstance(model, nn.parallel.DistributedDataParallel):
                model = model.module
            else:
                return model

    def materialize(self, model: nn.Module) -> None:
        """A model built on the meta device (init_empty_weights) gets a whole copy on this rank:
        rank 0's weights where rank 0 has them, else its modules' reset_parameters()."""
        note = materialize_whole(model, self.state.device, self._replaced)
        if note and self.state.is_main_process:
            print(f"notebook_launcher: {note}", flush=True)

    def data_stage(self) -> Any:
        """None: every rank reads its batches (a pipeline says which of its ranks read: StageData)."""
        return None

    def prepare_optimizer(self, optimizer: torch.optim.Optimizer, models: list[nn.Module]) -> Any:
        rebind_optimizer(optimizer, self._replaced)  # it was created from meta parameters
        return optimizer

    # --------------------------------------------------------------- training
    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        self.precision.scale_loss(loss).backward(**kwargs)

    @contextlib.contextmanager
    def no_sync(self, model: nn.Module) -> Iterator[None]:
        """Skip gradient synchronisation inside the block (accumulation steps)."""
        yield

    def clip_grad_norm_(self, parameters: Iterable[torch.Tensor], max_norm: float, norm_type: float = 2.0):
        return torch.nn.utils.clip_grad_norm_(list(parameters), max_norm, norm_type=norm_type)

    # ------------------------------------------------------------ state dicts
    def model_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """A full state dict of the unwrapped model (on every rank)."""
        return self.unwrap_model(model).state_dict()

    def load_model_state_dict(self, model: nn.Module, state_dict: dict[str, torch.Tensor]) -> None:
        self.unwrap_model(model).load_state_dict(state_dict)

    def optimizer_state_dict(
        self, optimizer: torch.optim.Optimizer, model: nn.Module | None
    ) -> dict[str, Any]:
        return optimizer.state_dict()

    def load_optimizer_state_dict(
        self, optimizer: torch.optim.Optimizer, model: nn.Module | None, state_dict: dict[str, Any]
    ) -> None:
        optimizer.load_state_dict(state_dict)

    def save_training_state(
        self, folder: Path, models: list[nn.Module], optimizers: list[Any], writer: Any = None
    ) -> None:
        """Sharded strategies write their model and optimizer files here (called on every rank),
        through writer (checkpointing/writers.py: at once, or staged for an asynchronous save). The
        default layout (full state dicts in Accelerate's file names) is written by checkpoint.py."""
        raise NotImplementedError

    def load_training_state(self, folder: Path, models: list[nn.Module], optimizers: list[Any]) -> None:
        raise NotImplementedError

    @property
    def uses_default_checkpoint_files(self) -> bool:
        """True unless this strategy writes its own model/optimizer files (save_training_state)."""
        return type(self).save_training_state is Strategy.save_training_state

    @property
    def supports_async_save(self) -> bool:
        """Whether save_state(async_save=True) can stage this strategy's state and write it later."""
        return True

    @property
    def saves_on_every_rank(self) -> bool:
        """True when each rank writes its own model/optimizer files (sharded strategies)."""
        return False
