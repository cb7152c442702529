"""Find a model from what a user points at — a module, a callable, `file.py[:name]` or
`package.module:name` — and build it on the meta device (no memory, no weights, no download).

Used by `estimate_memory` and `notebook-launcher estimate-memory`. A file is run with
`__name__ != "__main__"`, so its training code under `if __name__ == "__main__":` does not run.
"""

from __future__ import annotations

import importlib
import inspect
import runpy
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import ConfigError

FACTORY_NAMES = ("build_model", "create_model", "get_model", "make_model", "model")
RUN_NAME = "__notebook_launcher_model__"


def build_on_meta(source: Any) -> Any:
    """An nn.Module for `source`, built on the meta device unless it is a module already."""
    import torch
    from torch import nn

    if isinstance(source, nn.Module):
        return source
    factory = resolve(source)
    try:
        with torch.device("meta"):
            model = factory()
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(
            f"Building the model from {_describe(source)} on the meta device failed: {type(exc).__name__}: {exc}. "
            "Point at a function or class that builds the model without arguments and without loading weights."
        ) from exc
    if not isinstance(model, nn.Module):
        raise ConfigError(
            f"{_describe(source)} returned {type(model).__name__}, not a torch.nn.Module; point at a function "
            "or class that builds the model."
        )
    return model


def resolve(source: Any) -> Callable[[], Any]:
    """The zero-argument callable that builds the model."""
    if callable(source):
        return source
    if not isinstance(source, str) or not source.strip():
        raise ConfigError(
            f"Cannot make a model from {source!r}: give an nn.Module, a function or class that builds one, "
            "'path/to/file.py[:name]' or 'package.module:name'."
        )
    text = source.strip()
    path_part, name = text.rsplit(":", 1) if ":" in text and not _is_drive(text) else (text, "")
    if path_part.endswith(".py") or Path(path_part).is_file():
        return _from_file(Path(path_part), name, text)
    if name:
        return _from_module(path_part, name, text)
    raise ConfigError(
        f"{text!r} is neither a Python file nor 'package.module:name'. Models are not downloaded (no hub "
        "access): write the model in a file (e.g. model.py with a build_model() function) and pass "
        "'model.py', or pass 'package.module:build_model'."
    )


def _from_file(path: Path, name: str, text: str) -> Callable[[], Any]:
    if not path.is_file():
        raise ConfigError(f"Model file {str(path)!r} does not exist (from {text!r}).")
    try:
        namespace = runpy.run_path(str(path), run_name=RUN_NAME)
    except Exception as exc:
        raise ConfigError(f"Running {str(path)!r} failed: {type(exc).__name__}: {exc}") from exc
    return _pick(namespace, name, f"file {str(path)!r}")


def _from_module(module_name: str, name: str, text: str) -> Callable[[], Any]:
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"Cannot import {module_name!r} (from {text!r}): {exc}.") from exc
    return _pick(vars(module), name, f"module {module_name!r}")


def _pick(namespace: dict[str, Any], name: str, where: str) -> Callable[[], Any]:
    from torch import nn

    if name:
        if name not in namespace:
            found = _candidates(namespace)
            raise ConfigError(
                f"{where} has no {name!r}. It defines: {', '.join(found) or 'no function or nn.Module class'}."
            )
        return _callable(namespace[name], f"{where}:{name}")
    for factory in FACTORY_NAMES:
        if callable(namespace.get(factory)):
            return namespace[factory]
    classes = [
        v
        for v in namespace.values()
        if inspect.isclass(v) and issubclass(v, nn.Module) and v.__module__ == namespace.get("__name__")
    ]
    if len(classes) == 1:
        return classes[0]
    found = _candidates(namespace)
    raise ConfigError(
        f"Which model in {where}? Define build_model() there, or name it: '...:NAME'. "
        f"Candidates: {', '.join(found) or 'none'}."
    )


def _callable(value: Any, where: str) -> Callable[[], Any]:
    from torch import nn

    if isinstance(value, nn.Module):
        return lambda: value
    if callable(value):
        return value
    raise ConfigError(
        f"{where} is a {type(value).__name__}; it must build the model (a function or a class)."
    )


def _candidates(namespace: dict[str, Any]) -> list[str]:
    own = namespace.get("__name__")
    return sorted(
        k
        for k, v in namespace.items()
        if not k.startswith("_") and callable(v) and getattr(v, "__module__", None) == own
    )


def _is_drive(text: str) -> bool:
    return len(text) > 2 and text[1] == ":" and text[2] in "\\/"


def _describe(source: Any) -> str:
    return repr(source) if isinstance(source, str) else getattr(source, "__qualname__", type(source).__name__)
