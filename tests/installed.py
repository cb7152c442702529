"""Skip a test module when a package it needs is not installed, without importing the package:
every xdist worker collects the whole suite, and importing nbformat, mlflow or wandb there costs
each worker seconds of CPU that the tests themselves pay again where they use them."""

from __future__ import annotations

import importlib.util

import pytest


def skip_module_unless_installed(*names: str) -> None:
    """Skip the calling test module when one of `names` cannot be imported (found by its spec)."""
    missing = [name for name in names if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(
            f"{', '.join(missing)} not installed (in the test extra: pip install -e .[test])",
            allow_module_level=True,
        )
