"""fp8 training: which Linear layers are converted, and the conversion (torchao, or Transformer Engine).

`Precision` has already refused fp8 on hardware without it (CUDA capability 8.9+). Here the model
is converted before any strategy wraps it:

- torchao (`pip install torchao`): `convert_to_float8_training` swaps the chosen nn.Linear layers for
  Float8Linear (dynamic tensor-wise scaling); FSDP2 shards them like any other Linear.
- Transformer Engine (used when torchao is absent and `transformer_engine` is installed): the chosen
  layers become `te.Linear` with the same weights, and forward runs under `te.fp8_autocast`.

Which layers: every nn.Linear whose in and out features are multiples of 16 (what fp8 matmuls
need), except the model's last Linear (the output head, sensitive to fp8 rounding) and the output
projection inside nn.MultiheadAttention (which reads its weight directly, bypassing the module).
That choice is plain module-tree arithmetic, tested on CPU.
"""

from __future__ import annotations

import functools
import importlib.util
from typing import Any

from torch import nn

from ...errors import ConfigError, install_hint

_ALIGN = 16


def fp8_linear_names(model: nn.Module) -> list[str]:
    """Qualified names of the Linear layers fp8 training converts in this model."""
    inside_attention = {
        id(sub) for m in model.modules() if isinstance(m, nn.MultiheadAttention) for sub in m.modules()
    }
    linears = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    last = linears[-1][0] if linears else None
    return [
        name
        for name, m in linears
        if name != last
        and id(m) not in inside_attention
        and m.in_features % _ALIGN == 0
        and m.out_features % _ALIGN == 0
    ]


def fp8_backend() -> str:
    """'torchao' or 'transformer_engine', whichever is installed (torchao first)."""
    if importlib.util.find_spec("torchao") is not None:
        return "torchao"
    if importlib.util.find_spec("transformer_engine") is not None:
        return "transformer_engine"
    raise ConfigError(
        "mixed_precision='fp8' needs torchao (or NVIDIA Transformer Engine), and neither is installed; "
        f"run {install_hint('torchao', 'fp8')}, or use mixed_precision='bf16'."
    )


def convert_to_fp8(model: nn.Module, backend: str | None = None) -> nn.Module:
    """Convert the model in place for fp8 training; returns it. A model with no eligible layer is an error."""
    names = fp8_linear_names(model)
    if not names:
        raise ConfigError(
            f"mixed_precision='fp8' found no Linear layer to convert in {type(model).__name__}: fp8 needs "
            f"nn.Linear layers whose in/out features are multiples of {_ALIGN} (the last Linear is kept in "
            "bf16). Use mixed_precision='bf16' for this model."
        )
    backend = backend or fp8_backend()
    if backend == "torchao":
        return _convert_torchao(model, set(names))
    return _convert_transformer_engine(model, set(names))


def _convert_torchao(model: nn.Module, names: set[str]) -> nn.Module:
    from torchao.float8 import convert_to_float8_training

    return convert_to_float8_training(model, module_filter_fn=lambda _module, fqn: fqn in names)


def _convert_transformer_engine(model: nn.Module, names: set[str]) -> nn.Module:
    import transformer_engine.pytorch as te

    for name in names:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        old: nn.Linear = getattr(parent, child)
        new = te.Linear(
            old.in_features, old.out_features, bias=old.bias is not None, params_dtype=old.weight.dtype
        )
        new.to(old.weight.device)
        # The same Parameter objects, so an optimizer created before prepare() still updates them.
        new.weight = old.weight
        if old.bias is not None:
            new.bias = old.bias
        setattr(parent, child, new)
    original = model.forward

    @functools.wraps(original)
    def forward(*args: Any, **kwargs: Any) -> Any:
        with te.fp8_autocast(enabled=True):
            return original(*args, **kwargs)

    model.forward = forward
    return model
