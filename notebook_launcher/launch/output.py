"""Print workers' output into the calling cell, each line prefixed with its rank."""

from __future__ import annotations

import sys
from collections.abc import Iterable

from .events import HangReported, MemoryWarning, OutputLine, RunRestarting


class CellPrinter:
    """Observer that writes `[rank N] line` to this process's stdout/stderr (the cell, in a kernel)."""

    def __init__(self, show_ranks: int | Iterable[int] | None = None, prefix: bool = True) -> None:
        if isinstance(show_ranks, int):
            show_ranks = [show_ranks]
        self.show_ranks = None if show_ranks is None else set(show_ranks)
        self.prefix = prefix

    def __call__(self, event: object) -> None:
        if isinstance(event, HangReported) and event.report.reason == "stall":
            sys.stderr.write(event.report.text() + "\n")  # a timeout's report comes with LaunchTimeout
            sys.stderr.flush()
            return
        if isinstance(event, RunRestarting):
            sys.stderr.write(f"notebook_launch: {event.text}\n")
            sys.stderr.flush()
            return
        if isinstance(event, MemoryWarning):  # one line, whatever ranks are shown
            sys.stderr.write(f"notebook_launcher: {event.text}\n")
            sys.stderr.flush()
            return
        if not isinstance(event, OutputLine):
            return
        if self.show_ranks is not None and event.rank not in self.show_ranks:
            return
        stream = sys.stdout if event.stream == "stdout" else sys.stderr
        text = f"[rank{event.rank}] {event.text}\n" if self.prefix else event.text + "\n"
        stream.write(text)
        stream.flush()
