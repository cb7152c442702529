"""Accelerate's LocalSGD: each rank takes `local_sgd_steps` optimizer steps on its own (no gradient
all-reduce), then the ranks average their parameters; once more when the block ends.

Whole-model averaging needs every rank to hold the whole model: DDP or one process, not FSDP or
DeepSpeed, whose ranks hold shards.
"""

from __future__ import annotations

import contextlib
from types import TracebackType
from typing import Any

import torch
from torch import nn

from ..config.enums import DistributedType
from ..errors import AcceleratorError

_WHOLE_MODEL = (DistributedType.NO, DistributedType.MULTI_CPU, DistributedType.MULTI_GPU)


class LocalSGD:
    """`with LocalSGD(accelerator, model, local_sgd_steps=8) as local_sgd:` ... `local_sgd.step()` after
    each optimizer.step(). enabled=False (or one process) runs the block as plain training."""

    def __init__(
        self, accelerator: Any, model: nn.Module, local_sgd_steps: int, enabled: bool = True
    ) -> None:
        kind = accelerator.distributed_type
        if kind not in _WHOLE_MODEL:
            raise AcceleratorError(
                f"LocalSGD averages whole models, but this run's distributed_type is {kind}, whose ranks hold "
                "shards of the model. Use LocalSGD with DDP (MULTI_GPU / MULTI_CPU), or drop it under FSDP/DeepSpeed."
            )
        if isinstance(local_sgd_steps, bool) or not isinstance(local_sgd_steps, int) or local_sgd_steps < 1:
            raise AcceleratorError(f"local_sgd_steps={local_sgd_steps!r} must be a positive integer.")
        self.accelerator = accelerator
        self.model = model
        self.local_sgd_steps = local_sgd_steps
        self.enabled = enabled and kind != DistributedType.NO
        self.num_steps = 0
        self._no_sync: contextlib.AbstractContextManager[Any] | None = None

    def __enter__(self) -> LocalSGD:
        if self.enabled:
            self._no_sync = self.accelerator.no_sync(self.model)
            self._no_sync.__enter__()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self.enabled or self._no_sync is None:
            return
        try:
            if kind is None:  # after an error a peer may never reach the collective: do not wait for it
                self._average()
        finally:
            self._no_sync.__exit__(kind, value, tb)
            self._no_sync = None

    def step(self) -> None:
        """Count one optimizer step; every local_sgd_steps-th averages the parameters across ranks."""
        self.num_steps += 1
        if self.enabled and self.num_steps % self.local_sgd_steps == 0:
            self._average()

    def _average(self) -> None:
        self.accelerator.wait_for_everyone()
        with torch.no_grad():
            for param in self.model.parameters():
                param.copy_(self.accelerator.reduce(param.detach(), reduction="mean"))
