"""Where a model is cut into pipeline stages, and the stage modules built from its own blocks.

The rule: the model is an `nn.Sequential` (its forward runs its children in order). Its blocks
("units") are its children, and the children of any child that is itself a plain `nn.Sequential`,
recursively: `Sequential(embed=..., layers=Sequential(b0, b1, ...), head=...)` has the units
"embed", "layers.0", "layers.1", ..., "head". A stage is a run of consecutive units.

- split_points=["layers.4", ...]: a new stage begins at each named unit (in order).
- None: an even split by parameter count: stage k begins at the unit boundary whose parameters
  before it come nearest to k/S of the whole (S stages), every stage holding at least one unit.

A stage module is a skeleton of plain Sequentials that holds the stage's units under their original
names ("layers.4.weight" stays "layers.4.weight"), so state dicts read like the whole model's.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from torch import nn

from ....errors import AcceleratorError, ConfigError, closest


def _is_plain_sequential(module: nn.Module) -> bool:
    return isinstance(module, nn.Sequential) and type(module).forward is nn.Sequential.forward


def units(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The model's blocks in running order, by qualified name."""
    if not _is_plain_sequential(model):
        raise AcceleratorError(
            f"Pipeline parallelism cuts an nn.Sequential into stages, but got {type(model).__name__} (a "
            "forward of its own cannot be cut). Write the model as nn.Sequential(OrderedDict(embed=..., "
            "layers=nn.Sequential(*blocks), head=...)) whose children run in order (docs/model-parallel.md, "
            "'Pipeline parallelism')."
        )
    out: list[tuple[str, nn.Module]] = []

    def walk(module: nn.Module, prefix: str) -> None:
        for name, child in module.named_children():
            full = f"{prefix}{name}"
            if _is_plain_sequential(child) and any(True for _ in child.children()):
                walk(child, full + ".")
            else:
                out.append((full, child))

    walk(model, "")
    return out


def _param_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def stage_bounds(
    blocks: Sequence[tuple[str, nn.Module]], n_stages: int, split_points: Sequence[str] | None
) -> list[int]:
    """Index of the first unit of each stage (n_stages entries, the first 0)."""
    names = [n for n, _ in blocks]
    if len(names) < n_stages:
        raise ConfigError(
            f"The model has {len(names)} blocks ({', '.join(names)}) for {n_stages} pipeline stages; each stage "
            "needs at least one block. Use fewer stages (pp_size x virtual_stages) or a model with more blocks."
        )
    if split_points is not None:
        starts = [0]
        for point in split_points:
            if point not in names:
                raise ConfigError(
                    f"TorchPipelineParallelConfig split_points names {point!r}, which is no block of the "
                    f"model (blocks: {', '.join(names)}).{closest(point, names)}"
                )
            starts.append(names.index(point))
        if any(b <= a for a, b in zip(starts, starts[1:], strict=False)):
            raise ConfigError(
                f"TorchPipelineParallelConfig split_points={list(split_points)!r} must name blocks in running "
                f"order, none first (blocks: {', '.join(names)})."
            )
        return starts
    counts = [_param_count(m) for _, m in blocks]
    total = sum(counts) or 1
    before = [sum(counts[:i]) for i in range(len(counts) + 1)]  # parameters before unit i
    starts = [0]
    for k in range(1, n_stages):
        lo, hi = starts[-1] + 1, len(names) - (n_stages - k)  # leave a unit for each later stage
        target = k * total / n_stages
        starts.append(min(range(lo, hi + 1), key=lambda i: (abs(before[i] - target), i)))
    return starts


def stage_unit_names(
    blocks: Sequence[tuple[str, nn.Module]], n_stages: int, split_points: Sequence[str] | None
) -> list[list[str]]:
    """The unit names of every stage, in stage order."""
    starts = [*stage_bounds(blocks, n_stages, split_points), len(blocks)]
    names = [n for n, _ in blocks]
    return [names[a:b] for a, b in zip(starts, starts[1:], strict=False)]


def skeleton(model: nn.Module, keep: Sequence[str]) -> nn.Sequential:
    """Plain Sequentials holding the units `keep` (by qualified name) at their original paths, in the
    model's order; the units are the model's own module objects (nothing is copied)."""
    wanted = set(keep)

    def build(module: nn.Module, prefix: str) -> nn.Sequential | None:
        children: OrderedDict[str, nn.Module] = OrderedDict()
        for name, child in module.named_children():
            full = f"{prefix}{name}"
            if full in wanted:
                children[name] = child
            elif _is_plain_sequential(child) and any(k.startswith(full + ".") for k in wanted):
                inner = build(child, full + ".")
                if inner is not None:
                    children[name] = inner
        return nn.Sequential(children) if children else None

    return build(model, "") or nn.Sequential()
