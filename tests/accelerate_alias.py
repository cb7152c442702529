"""Accelerate's scripts, unchanged, with their `accelerate` imports answered by notebook_launcher.

install() puts a meta-path finder first: `accelerate` is notebook_launcher, `accelerate.X` is
notebook_launcher.X, and `accelerate.test_utils` a small stand-in with the decorators the scripts
take from it. Only for the process that calls it (and the workers it forks).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
from typing import Any

PACKAGE = "accelerate"


def _test_utils() -> types.ModuleType:
    """What Accelerate's scripts import from accelerate.test_utils: skip markers for optional pieces."""
    import pytest

    from notebook_launcher.utils import is_bnb_available

    module = types.ModuleType(f"{PACKAGE}.test_utils")
    module.require_bnb = pytest.mark.skipif(not is_bnb_available(), reason="test requires bitsandbytes")
    return module


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finder and loader in one: the module made for `accelerate...` is replaced by ours on exec."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name == PACKAGE or name.startswith(PACKAGE + "."):
            return importlib.util.spec_from_loader(name, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> None:
        return None  # a fresh placeholder; exec_module puts ours in sys.modules in its place

    def exec_module(self, module: types.ModuleType) -> None:
        name = module.__name__
        if name == f"{PACKAGE}.test_utils":
            sys.modules[name] = _test_utils()
            return
        ours = "notebook_launcher" + name[len(PACKAGE) :]
        sys.modules[name] = importlib.import_module(ours)


def install() -> None:
    for name in [n for n in sys.modules if n == PACKAGE or n.startswith(PACKAGE + ".")]:
        del sys.modules[name]  # a real accelerate imported earlier must not answer
    if not any(isinstance(finder, _Alias) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Alias())
