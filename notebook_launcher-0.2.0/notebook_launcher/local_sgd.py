"""Accelerate's `accelerate.local_sgd` import path: `from notebook_launcher.local_sgd import LocalSGD`
(lazy: torch loads on first use)."""

from __future__ import annotations

from ._lazy import face

_LAZY = {"LocalSGD": "notebook_launcher.runtime.local_sgd"}
__all__ = sorted(_LAZY)
__getattr__, __dir__ = face(__name__, globals(), _LAZY, {})
