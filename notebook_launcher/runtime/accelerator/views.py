"""The Accelerator's read-only views of its settings (Accelerate's property names), kept apart so
facade.py stays about preparing and training."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import torch

from ...config.enums import DistributedType
from ..world import preemption

if TYPE_CHECKING:
    from ...config import LaunchConfig
    from ..data import GradientState
    from ..precision.mixed import Precision
    from ..world.shared_state import AcceleratorState
    from ..world.state import ProcessState
    from ..wrappers import AcceleratedOptimizer
    from .configurations import DataLoaderConfiguration, ProjectConfiguration


class SettingsView:
    """Mixin: needs self.config, self.gradient_state, self.dataloader_config,
    self.project_configuration, self.state, self.precision, self._optimizers."""

    # declared only: the Accelerator sets them
    config: LaunchConfig
    gradient_state: GradientState
    dataloader_config: DataLoaderConfiguration
    project_configuration: ProjectConfiguration
    state: ProcessState  # (an AcceleratorState: ProcessState's fields and more)
    precision: Precision
    _optimizers: list[AcceleratedOptimizer]
    _distributed_type: DistributedType

    @property
    def preempted(self) -> bool:
        """True on every rank once SIGTERM or SIGUSR1 reached the launcher or any worker, from the
        optimizer step all ranks agreed on: save_state() and return (README: Long runs)."""
        return preemption.preempted()

    @property
    def restart_count(self) -> int:
        """0 on the first start; n after the launcher (or torchrun's agent) restarted the ranks n times."""
        return preemption.restart_count()

    @property
    def distributed_type(self) -> DistributedType:
        """The state's (`accelerator.state.distributed_type = ...` changes it, as in Accelerate)."""
        return self.state.__dict__.get("_distributed_type", self._distributed_type)

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

    @sync_gradients.setter
    def sync_gradients(self, value: bool) -> None:
        self.gradient_state.sync_gradients = value

    @property
    def optimizer_step_was_skipped(self) -> bool:
        """True when the last optimizer step was skipped (fp16 overflow); schedulers did not step."""
        return any(opt.step_was_skipped for opt in self._optimizers)

    @property
    def scaler(self) -> torch.amp.GradScaler | None:
        return self.precision.scaler

    @property
    def split_batches(self) -> bool:
        return self.dataloader_config.split_batches

    @property
    def even_batches(self) -> bool:
        return self.dataloader_config.even_batches

    @even_batches.setter
    def even_batches(self, value: bool) -> None:
        self.dataloader_config.even_batches = value

    @property
    def dispatch_batches(self) -> bool | None:
        return self.dataloader_config.dispatch_batches

    @property
    def use_seedable_sampler(self) -> bool:
        return self.dataloader_config.use_seedable_sampler

    @property
    def non_blocking(self) -> bool:
        return self.dataloader_config.non_blocking

    @property
    def project_dir(self) -> str | None:
        return self.project_configuration.project_dir

    @property
    def logging_dir(self) -> str | None:
        return self.project_configuration.logging_dir

    @property
    def save_iteration(self) -> int:
        return self.project_configuration.iteration

    @save_iteration.setter
    def save_iteration(self, value: int) -> None:
        self.project_configuration.iteration = int(value)

    @property
    def fsdp_plugin(self) -> Any:
        return cast("AcceleratorState", self.state).fsdp_plugin

    @property
    def deepspeed_plugin(self) -> Any:
        return cast("AcceleratorState", self.state).deepspeed_plugin
