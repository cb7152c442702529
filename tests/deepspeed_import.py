"""DeepSpeed for the tests that need it: imported here once (forked workers inherit it; its first import
costs ~10 s per process). A machine without DeepSpeed skips those tests with that reason; any other
import failure (a broken install, a torch it does not support) fails them with DeepSpeed's own error,
so that a test run cannot pass while DeepSpeed never ran.
"""

from __future__ import annotations

import importlib
import traceback

import pytest


def import_deepspeed_or_skip(*modules: str) -> None:
    """Import deepspeed (and `modules` after it); skip only when deepspeed itself is not installed."""
    for name in ("deepspeed", *modules):
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as missing:
            if missing.name == "deepspeed":
                pytest.skip(
                    "DeepSpeed is not installed (pip install deepspeed; it is in the test extra)",
                    allow_module_level=True,
                )
            pytest.fail(f"DeepSpeed is installed but `import {name}` failed:\n{traceback.format_exc()}")
        except Exception:
            pytest.fail(f"DeepSpeed is installed but `import {name}` failed:\n{traceback.format_exc()}")
