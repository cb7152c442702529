"""Where a model is cut into pipeline stages, and the stage modules built from its own blocks.

The rule (config/pipeline.py's units() and stage_bounds(), shared with estimate-memory): the model is an `nn.Sequential` (its forward runs its children in order). Its blocks
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

from ....config.pipeline import stage_bounds


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
            elif isinstance(child, nn.Sequential) and any(k.startswith(full + ".") for k in wanted):
                inner = build(child, full + ".")
                if inner is not None:
                    children[name] = inner
        return nn.Sequential(children) if children else None

    return build(model, "") or nn.Sequential()
