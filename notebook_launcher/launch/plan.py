"""LaunchPlan: everything decided before any worker process starts (built by planning/notebook.py,
carried out by the Supervisor)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .worker import WorkerSpec


@dataclass
class LaunchPlan:
    """Everything decided before any process starts."""

    context: Any  # a torch.multiprocessing context
    start_method: str
    specs: list[WorkerSpec]
    target: tuple[Any, tuple, dict] | None  # (fn, args, kwargs) handed over by fork
    world_size: int
    config: Any
    timeout: float | None = None
    store: Any = None  # the TCPStore this process hosts for the workers' rendezvous
