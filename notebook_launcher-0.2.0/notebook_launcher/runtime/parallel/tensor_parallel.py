"""Tensor parallel through prepare(): which plan a model gets, checked against the model before any
weight moves, then applied with torch's parallelize_module on the mesh's "tp" dim.

Three routes, the first that applies wins:
- the model already holds DTensors (transformers' `from_pretrained(..., tp_plan="auto",
  device_mesh=mesh["tp"])`, Accelerate's route): nothing to do;
- `TorchTensorParallelConfig(parallelize_fn=...)`: the user's function gets the model and the mesh;
- a plan: `TorchTensorParallelConfig(plan=...)`, else a transformers model's own (`model._tp_plan`,
  `config.base_model_tp_plan`).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from ...config.parallelism import TorchTensorParallelConfig
from ...config.tp_plan import matches, model_plan, split_dim
from ...errors import ConfigError


def is_tensor_parallel(model: nn.Module) -> bool:
    """True when some parameter is already a DTensor (the model was split when it was loaded)."""
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in model.parameters())


def expand_plan(model: nn.Module, plan: dict[str, str], tp_size: int) -> dict[str, str]:
    """{module name: style} for every module the plan's patterns match, each pattern matching at
    least one module and each planned dimension divisible by tp_size (else a ConfigError)."""
    modules = dict(model.named_modules())
    expanded: dict[str, str] = {}
    for pattern, style in plan.items():
        matched = matches(pattern, list(modules))
        if not matched:
            raise ConfigError(
                f"The tensor-parallel plan's pattern {pattern!r} matches no module of {type(model).__name__}. "
                f"Its splittable modules include: {', '.join(_splittable(modules)[:8]) or '(none)'}. Write "
                "patterns over these names (`*` stands for one part, e.g. 'layers.*.mlp.up_proj')."
            )
        for name in matched:
            check_divisible(name, modules[name], style, tp_size)
            expanded[name] = style
    _check_heads(model, expanded, tp_size)
    return expanded


def _splittable(modules: dict[str, nn.Module]) -> list[str]:
    return [n for n, m in modules.items() if n and isinstance(m, (nn.Linear, nn.Embedding))]


def check_divisible(name: str, module: nn.Module, style: str, tp_size: int) -> None:
    """The dimension a style splits must be a multiple of tp_size."""
    dims = split_dim(module, style)
    if dims is None:
        return
    what, size, _ = dims
    if size % tp_size:
        raise ConfigError(
            f"Tensor-parallel style {style!r} on layer {name!r} ({type(module).__name__}) splits its {what}={size} "
            f"over tp_size={tp_size}, which does not divide it. Choose a tp_size that divides {size}, or "
            "leave this layer out of the plan."
        )


def _check_heads(model: nn.Module, expanded: dict[str, str], tp_size: int) -> None:
    """Attention projections split by heads: the head counts must divide too."""
    config = getattr(model, "config", None)
    if config is None or not any(n.endswith(("q_proj", "k_proj", "v_proj")) for n in expanded):
        return
    for field in ("num_attention_heads", "num_key_value_heads"):
        heads = getattr(config, field, None)
        if isinstance(heads, int) and heads % tp_size:
            raise ConfigError(
                f"{type(model).__name__} has {field}={heads}, which tp_size={tp_size} does not divide: each "
                f"tensor-parallel rank must hold whole attention heads. Choose a tp_size that divides {heads}."
            )


def _check_loaded_split(model: nn.Module, tp_size: int) -> None:
    """A model split when it was loaded must be split over as many ranks as the mesh's tp dim."""
    from torch.distributed.tensor import DTensor

    for name, param in model.named_parameters():
        if isinstance(param, DTensor) and param.device_mesh.size() != tp_size:
            raise ConfigError(
                f"{type(model).__name__} was loaded split over {param.device_mesh.size()} ranks ({name!r}), but "
                f"ParallelismConfig tp_size={tp_size}. Load it on the mesh's tp dim "
                "(from_pretrained(..., tp_plan='auto', tp_size=accelerator.parallelism_config.tp_size) or "
                "device_mesh=accelerator.torch_device_mesh['tp']), or load it plainly and let prepare() split it."
            )


def torch_style(style: str) -> Any:
    """The torch ParallelStyle for a plan's style name (transformers' names included)."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel

    if style in ("colwise", "local_colwise"):
        return ColwiseParallel()
    if style in ("colwise_rep", "colwise_gather_output"):
        return ColwiseParallel(output_layouts=Replicate())
    if style in ("rowwise", "local_rowwise"):
        return RowwiseParallel()
    if style in ("rowwise_rep", "embedding_rowwise"):
        return RowwiseParallel(input_layouts=Replicate())
    if style == "sequence_parallel":
        return SequenceParallel()
    if style == "replicate":
        from .replicate_style import ReplicateParallel

        return ReplicateParallel()
    raise ConfigError(f"Unknown tensor-parallel style {style!r}.")


def apply_tensor_parallel(
    model: nn.Module, mesh: Any, handler: TorchTensorParallelConfig | None, tp_size: int
) -> tuple[nn.Module, str]:
    """Split the model over mesh["tp"]; returns the model and which route was taken (for notes)."""
    if is_tensor_parallel(model):
        _check_loaded_split(model, tp_size)
        return model, "already split when loaded"
    if handler is not None and handler.parallelize_fn is not None:
        result = handler.parallelize_fn(model, mesh)
        return (model if result is None else result), "parallelize_fn"
    plan = handler.plan if handler is not None and handler.plan is not None else model_plan(model)
    if not plan:
        raise ConfigError(
            f"tp_size={tp_size}, but {type(model).__name__} has no tensor-parallel plan: pass "
            "ParallelismConfig(tp_size=..., tp_handler=TorchTensorParallelConfig(plan={'layers.*.q_proj': "
            "'colwise', ...})) or parallelize_fn=..., or load a transformers model that has one."
        )
    expanded = expand_plan(model, plan, tp_size)
    from torch.distributed.tensor.parallel import parallelize_module

    parallelize_module(model, mesh["tp"], {name: torch_style(style) for name, style in expanded.items()})
    return model, f"plan ({len(expanded)} layers)"
