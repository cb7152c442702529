"""Accelerate's `accelerate.local_sgd` import path: `from notebook_launcher.local_sgd import LocalSGD`
(lazy: torch loads on first use)."""

from __future__ import annotations

from typing import Any

from ._lazy import face

_LAZY = {"LocalSGD": "notebook_launcher.runtime.local_sgd"}
__getattr__: Any = face("notebook_launcher.local_sgd", globals(), _LAZY, {})
__all__ = sorted(_LAZY)
