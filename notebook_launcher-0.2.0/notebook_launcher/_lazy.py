"""Lazy public faces: a module attribute is imported on first use, and a name Accelerate has but we do
not raises an ImportError that says so and what to use instead.

ImportError rather than AttributeError for those names on purpose: `from notebook_launcher.utils
import X` would turn an AttributeError into Python's bare "cannot import name", losing the advice.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


class UnsupportedNameError(ImportError):
    """An Accelerate name notebook_launcher does not provide; the message says what to use instead."""


def face(
    module_name: str, namespace: dict[str, Any], lazy: Mapping[str, str], unsupported: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of a lazy face module (`__dir__` lists its `__all__`)."""

    def __getattr__(name: str) -> Any:
        source = lazy.get(name)
        if source is not None:
            value = getattr(importlib.import_module(source), name)
            namespace[name] = value
            return value
        if name in unsupported:
            raise UnsupportedNameError(
                f"{module_name}.{name} is Accelerate's, and notebook_launcher does not support it: "
                f"{unsupported[name]}. See docs/migrating-from-accelerate.md."
            )
        raise AttributeError(f"module {module_name!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(namespace["__all__"])

    return __getattr__, __dir__
