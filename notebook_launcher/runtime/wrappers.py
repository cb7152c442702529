"""Thin wrappers that give optimizers and schedulers Accelerate's accumulation and fp16 semantics.

Inside an accumulation window `optimizer.step()` and `zero_grad()` do nothing; on a step that the
fp16 scaler skipped (inf/NaN gradients) the scheduler does not advance.
"""

from __future__ import annotations

from typing import Any

import torch

from .data import GradientState
from .precision.mixed import Precision
from .world import preemption, step_clock


class AcceleratedOptimizer(torch.optim.Optimizer):
    """Wraps the user's optimizer; everything not overridden is forwarded to it."""

    def __init__(self, optimizer: torch.optim.Optimizer, precision: Precision, gradient_state: GradientState):
        self.optimizer = optimizer
        self.precision = precision
        self.gradient_state = gradient_state
        # Accelerate's name: its scheduler (and its tests) read and set it to mark an overflowed step
        self._is_overflow = False
        self.steps_taken = 0

    # Delegated attributes that torch (schedulers, clip utilities) reads directly.
    @property
    def param_groups(self):
        return self.optimizer.param_groups

    @param_groups.setter
    def param_groups(self, value):
        self.optimizer.param_groups = value

    @property
    def state(self):
        return self.optimizer.state

    @state.setter
    def state(self, value):
        self.optimizer.state = value

    @property
    def defaults(self):
        return self.optimizer.defaults

    @defaults.setter
    def defaults(self, value):
        self.optimizer.defaults = value

    def __getattr__(self, name: str) -> Any:
        if name == "optimizer":
            raise AttributeError(name)
        return getattr(self.optimizer, name)

    def zero_grad(self, set_to_none: bool = True) -> None:
        if self.gradient_state.sync_gradients:
            self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        if not self.gradient_state.sync_gradients:
            return
        kwargs = {"closure": closure} if closure is not None else {}
        if step_clock.CLOCK.enabled:
            step_clock.CLOCK.optimizer_step(lambda: self._step(kwargs))
        else:
            self._step(kwargs)

    def _step(self, kwargs: dict[str, Any]) -> None:
        self._is_overflow = self.precision.optimizer_step(self.optimizer, **kwargs)
        self.steps_taken += 1  # ProjectConfiguration(save_every_n_steps=...) counts these
        preemption.agree(self.precision.device)  # every rank meets here: agree on a preemption request

    @property
    def step_was_skipped(self) -> bool:
        """Whether the last step was skipped because fp16 gradients overflowed."""
        return self._is_overflow

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state_dict)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        self.optimizer.add_param_group(param_group)

    def __repr__(self) -> str:
        return f"AcceleratedOptimizer({self.optimizer!r})"

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


class AcceleratedScheduler:
    """Steps the wrapped LR scheduler only after real optimizer steps.

    As in Accelerate, without split_batches it advances once per process each step, so a schedule
    written for one process ends after the same number of epochs on N processes.
    """

    def __init__(
        self,
        scheduler: Any,
        optimizers: list[AcceleratedOptimizer],
        gradient_state: GradientState,
        *,
        num_processes: int,
        split_batches: bool,
        step_with_optimizer: bool,
    ) -> None:
        self.scheduler = scheduler
        self.optimizers = optimizers
        self.gradient_state = gradient_state
        self.num_processes = num_processes
        self.split_batches = split_batches
        self.step_with_optimizer = step_with_optimizer

    def step(self, *args: Any, **kwargs: Any) -> None:
        if not self.step_with_optimizer:
            self.scheduler.step(*args, **kwargs)
            return
        if not self.gradient_state.sync_gradients:
            return
        if any(opt.step_was_skipped for opt in self.optimizers):
            return
        times = 1 if self.split_batches else self.num_processes
        for _ in range(times):
            total = getattr(self.scheduler, "total_steps", None)
            if total is not None and self.scheduler.last_epoch >= total:
                break
            self.scheduler.step(*args, **kwargs)

    def get_last_lr(self) -> list[float]:
        return self.scheduler.get_last_lr()

    def state_dict(self) -> dict[str, Any]:
        return self.scheduler.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state_dict)

    def __getattr__(self, name: str) -> Any:
        if name == "scheduler":
            raise AttributeError(name)
        return getattr(self.scheduler, name)
