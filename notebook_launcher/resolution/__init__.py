"""How a launch is decided, once, for every entry: `notebook_launch`, `start_launch`, Accelerate's
`notebook_launcher()` face, `%%ranks`, `cluster=` and `notebook-launcher launch`.

`resolve_launch` takes the layered config (arguments > YAML > defaults, plus what the environment
says) and returns one frozen `LaunchRequest`; every later stage reads it and none decides again.
Torch-free; imports only config/, system/ and errors (tests/test_architecture.py).
"""

from __future__ import annotations

from .request import ENTRIES, Entry, LaunchRequest
from .resolve import layered_config, resolve_launch

__all__ = ["ENTRIES", "Entry", "LaunchRequest", "layered_config", "resolve_launch"]
