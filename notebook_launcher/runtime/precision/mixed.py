"""Mixed precision: which autocast to enter, whether a GradScaler is needed, and fp32 outputs.

fp16 gets a GradScaler (on CPU too) so small gradients survive; bf16 needs none. fp8 is checked
against the hardware here; its module conversion lives with the fp8 support.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import torch

from ...errors import HardwareError
from ..ops import convert_to_fp32

_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp8": torch.bfloat16}


class Precision:
    """The autocast context and loss scaler for one mixed-precision mode on one device."""

    def __init__(
        self,
        mode: str,
        device: torch.device,
        scaler_kwargs: dict[str, Any] | None = None,
        autocast_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.mode = mode
        self.device = device
        self.autocast_kwargs = dict(autocast_kwargs or {})
        if mode == "fp8":
            check_fp8_hardware(device)
        self.scaler: torch.amp.GradScaler | None = None
        if mode == "fp16":
            self.scaler = torch.amp.GradScaler(device.type, **(scaler_kwargs or {}))

    @property
    def dtype(self) -> torch.dtype | None:
        return _DTYPES.get(self.mode)

    @contextlib.contextmanager
    def autocast(self, enabled: bool = True, **overrides: Any) -> Iterator[None]:
        """Run the block in this mode's autocast (a no-op for 'no')."""
        if self.dtype is None or not enabled:
            yield
            return
        kwargs = {**self.autocast_kwargs, **overrides}
        with torch.autocast(device_type=self.device.type, dtype=self.dtype, **kwargs):
            yield

    def wrap_forward(self, model: torch.nn.Module) -> None:
        """Make model.forward run under autocast and return float32 tensors, as Accelerate does."""
        if self.dtype is None or getattr(model, "_nl_original_forward", None) is not None:
            return
        original = model.forward
        precision = self

        @functools.wraps(original)
        def forward(*args: Any, **kwargs: Any) -> Any:
            with precision.autocast():
                out = original(*args, **kwargs)
            return convert_to_fp32(out)

        model._nl_original_forward = original  # type: ignore[assignment]  # torch types Module.__setattr__ as Tensor | Module; any value is kept
        model.forward = forward

    @staticmethod
    def unwrap_forward(model: torch.nn.Module) -> None:
        original = getattr(model, "_nl_original_forward", None)
        if original is not None:
            model.forward = original
            del model._nl_original_forward

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        return self.scaler.scale(loss) if self.scaler is not None else loss

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Unscale gradients once before clipping (safe to call again in the same step)."""
        if self.scaler is None:
            return
        state = self.scaler._per_optimizer_states[id(optimizer)]
        if state["stage"].name == "READY":
            self.scaler.unscale_(optimizer)

    def optimizer_step(self, optimizer: torch.optim.Optimizer, **kwargs: Any) -> bool:
        """Step (through the scaler for fp16); return True when the step was skipped for inf/NaN.

        Without our scaler, an optimizer that scales its own loss (DeepSpeed's engine) says whether
        it skipped through its `step_was_skipped`."""
        if self.scaler is None:
            optimizer.step(**kwargs)
            return bool(getattr(optimizer, "step_was_skipped", False))
        before = self.scaler.get_scale()
        self.scaler.step(optimizer, **kwargs)
        self.scaler.update()
        return self.scaler.get_scale() < before


def check_fp8_hardware(device: torch.device) -> None:
    """fp8 training needs a CUDA GPU of compute capability 8.9 or newer; say so otherwise."""
    if device.type != "cuda":
        raise HardwareError(
            f"mixed_precision='fp8' needs a CUDA GPU of compute capability 8.9+ (Ada, Hopper or newer); "
            f"this process runs on {device.type!r}. Use mixed_precision='bf16' here."
        )
    capability = torch.cuda.get_device_capability(device)
    if capability < (8, 9):
        raise HardwareError(
            f"mixed_precision='fp8' needs compute capability 8.9+; {torch.cuda.get_device_name(device)} has "
            f"{capability[0]}.{capability[1]}. Use mixed_precision='bf16' (capability 8.0+) or 'fp16'."
        )
