"""A rank's displays shown where they were made among its printed lines.

Displays come over the message pipe, lines over stdout, read separately; the worker writes a
numbered mark line into stdout where each display belongs (worker/relay.py). A display is shown
when its mark is read; one whose mark never comes (stdout redirected by the user) is shown when
the rank's pipes are drained.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class DisplayOrder:
    def __init__(self, emit: Callable[[Any], None]) -> None:
        self.emit = emit
        self.pending: dict[int, dict[int, Any]] = {}
        self.marked: dict[int, int] = {}

    def arrived(self, rank: int, seq: int, event: Any) -> None:
        if seq <= self.marked.get(rank, 0):
            self.emit(event)  # its mark was read already (we stopped waiting for the message)
        else:
            self.pending.setdefault(rank, {})[seq] = event

    def has(self, rank: int, seq: int) -> bool:
        return seq in self.pending.get(rank, {})

    def mark(self, rank: int, seq: int) -> None:
        self.marked[rank] = max(seq, self.marked.get(rank, 0))
        waiting = self.pending.get(rank, {})
        for number in sorted(s for s in waiting if s <= seq):
            self.emit(waiting.pop(number))

    def flush(self, rank: int) -> None:
        waiting = self.pending.pop(rank, {})
        for number in sorted(waiting):
            self.emit(waiting[number])
