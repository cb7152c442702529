"""DistributedDataParallel: every rank holds the whole model; gradients are averaged in backward."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch import nn

from .base import Strategy
from .comm_hooks import HOOK_FIELDS, register_comm_hook


class DDPStrategy(Strategy):
    name = "DDP"

    def wrap_model(self, model: nn.Module, *, device_placement: bool = True) -> nn.Module:
        model = super().wrap_model(model, device_placement=device_placement)
        if not any(p.requires_grad for p in model.parameters()):
            return model  # a frozen module (e.g. a loss with buffers) needs no gradient sync
        device = self.state.device
        kwargs = {k: v for k, v in self.ddp_kwargs.items() if k not in HOOK_FIELDS}
        if device.type == "cuda":
            kwargs.setdefault("device_ids", [device.index])
            kwargs.setdefault("output_device", device.index)
        wrapped = nn.parallel.DistributedDataParallel(model, **kwargs)
        register_comm_hook(wrapped, self.ddp_kwargs, device)
        return wrapped

    @contextlib.contextmanager
    def no_sync(self, model: nn.Module) -> Iterator[None]:
        if isinstance(model, nn.parallel.DistributedDataParallel):
            with model.no_sync():
                yield
        else:
            yield
