"""Where a model is cut into pipeline stages, and the stage modules built from its own blocks.

The rule (config/pipeline.py's units() and stage_bounds(), shared with estimate-memory): the model
is an `nn.Sequential` (its forward runs its children in order), or a model whose forward torch.fx
traces into a plain chain of submodule calls (`embed`, each entry of a ModuleList `layers`, `norm`,
`head`). Its blocks ("units") are those, with any block that is itself a plain `nn.Sequential`
opened up, recursively: `Sequential(embed=..., layers=Sequential(b0, b1, ...), head=...)` has the
units "embed", "layers.0", "layers.1", ..., "head". A stage is a run of consecutive units.

- split_points=["layers.4", ...]: a new stage begins at each named unit (in order).
- None: an even split by parameter count: stage k begins at the unit boundary whose parameters
  before it come nearest to k/S of the whole (S stages), every stage holding at least one unit.

A stage module is a skeleton of plain Sequentials that holds the stage's units under their original
names ("layers.4.weight" stays "layers.4.weight"), so state dicts read like the whole model's.
"""

from __future__ import annotations

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
    """Plain Sequentials holding the units `keep` (qualified names, in running order) at their
    original paths, so the Sequential runs them in that order; the units are the model's own module
    objects (nothing is copied). Units under one container ("layers.2", "layers.3") share one
    Sequential ("layers"): units() made sure a container's entries run one after another."""
    root = nn.Sequential()
    for name in keep:
        *path, last = name.split(".")
        parent: nn.Module = root
        for part in path:
            inner = parent._modules.get(part)
            if inner is None:
                inner = nn.Sequential()
                parent.add_module(part, inner)
            parent = inner
        parent.add_module(last, model.get_submodule(name))
    return root
