"""Tensor-parallel plans as data: which module names a pattern matches, a model's own plan, and
which dimension of a layer a style splits. No torch import (duck-typed modules), so the runtime
(which splits) and estimate-memory (which counts) read plans the same way."""

from __future__ import annotations

import re
from typing import Any


def pattern_regex(pattern: str) -> re.Pattern[str]:
    """`layers.*.attn.q_proj`: `*` stands for one part of a module name."""
    return re.compile(r"\.".join("[^.]+" if part == "*" else re.escape(part) for part in pattern.split(".")))


def model_plan(model: Any) -> dict[str, str] | None:
    """A model's own plan (transformers' `_tp_plan`, or `config.base_model_tp_plan` under the base
    model's prefix), keyed by module names of `model`; None when it has none."""
    plan = getattr(model, "_tp_plan", None)
    if plan:
        return dict(plan)
    base = getattr(getattr(model, "config", None), "base_model_tp_plan", None)
    if not base:
        return None
    prefix = getattr(model, "base_model_prefix", "")
    if prefix and hasattr(getattr(model, prefix, None), "named_modules"):
        return {f"{prefix}.{pattern}": style for pattern, style in base.items()}
    return dict(base)


def matches(pattern: str, names: list[str]) -> list[str]:
    regex = pattern_regex(pattern)
    return [name for name in names if name and regex.fullmatch(name)]


def split_dim(module: Any, style: str) -> tuple[str, int, int] | None:
    """(what, size, weight dim) a style splits on a Linear or Embedding; None when nothing is split."""
    colwise = style.startswith(("colwise", "local_colwise"))
    rowwise = style.startswith(("rowwise", "local_rowwise", "embedding_rowwise"))
    if hasattr(module, "out_features") and hasattr(module, "in_features"):  # Linear: weight (out, in)
        if colwise:
            return "out_features", module.out_features, 0
        if rowwise:
            return "in_features", module.in_features, 1
    if hasattr(module, "num_embeddings") and hasattr(module, "embedding_dim"):  # Embedding: (num, dim)
        if colwise:
            return "embedding_dim", module.embedding_dim, 1
        if rowwise:
            return "num_embeddings", module.num_embeddings, 0
    return None
