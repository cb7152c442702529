"""A one-way pipe from the runtime to whoever launched it (metrics, progress).

The worker side of notebook_launch installs a sink; outside a launch there is none and every call
is a cheap no-op. No collective, no blocking: a metric is one small message to the parent.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

Sink = Callable[[str, dict[str, Any]], None]
_sink: Sink | None = None


def set_sink(sink: Sink | None) -> None:
    global _sink
    _sink = sink


def has_sink() -> bool:
    return _sink is not None


def emit(kind: str, **payload: Any) -> None:
    """Send one record ('metric' or 'progress') to the launcher, if there is one."""
    if _sink is None:
        return
    payload.setdefault("time", time.time())
    try:
        _sink(kind, payload)
    except Exception:  # a broken parent must never break training
        pass
