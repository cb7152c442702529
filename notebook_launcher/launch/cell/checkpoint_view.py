"""The checkpoints of a run as the cell, the RunView and `%ranks status` show them: the save being
written in the background (its step, folder, MB written per rank) and the last complete one.

Fed with CheckpointWriting events (each rank's background writer: staged, then bytes on disk at a
modest rate, then its files written or failed) and CheckpointSaved events (the folder published, or
a synchronous save finished). A save stays "in flight" until it is published; one that never is
(a rank killed during the write, a failed write) is dropped when the ranks start again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape
from typing import Any

from ..events import CheckpointSaved, CheckpointWriting, RunRestarting

MB = 1e6


@dataclass
class SaveInFlight:
    """One save being written: its step and each rank's latest report."""

    path: str
    step: int
    ranks: dict[int, CheckpointWriting] = field(default_factory=dict)


@dataclass
class CheckpointBoard:
    """What is shown of a run's checkpoints; `apply(event)` is True when what is shown changed."""

    in_flight: dict[str, SaveInFlight] = field(default_factory=dict)
    last_complete: CheckpointSaved | None = None
    # (folder, step) of each published save: a rank's last report may come after the publication
    # (another node's relay, or another rank's pipe read first) and must not bring the save back
    published: set[tuple[str, int]] = field(default_factory=set)

    def apply(self, event: object) -> bool:
        if isinstance(event, CheckpointWriting):
            if (event.path, event.step) in self.published:
                return False
            save = self.in_flight.setdefault(event.path, SaveInFlight(event.path, event.step))
            save.ranks[event.rank] = event
            return True
        if isinstance(event, CheckpointSaved):
            self.in_flight.pop(event.path, None)
            self.published.add((event.path, event.step))
            self.last_complete = event
            return True
        if isinstance(event, RunRestarting) and self.in_flight:
            self.in_flight.clear()  # cut off with the attempt: never published, never the latest
            return True
        return False

    @property
    def empty(self) -> bool:
        return not self.in_flight and self.last_complete is None

    def lines(self) -> list[str]:
        """'checkpoint_3 (step 120) being written: rank 0 12.0 of 40.1 MB, rank 1 written (3.1 MB)'
        per save in flight, then 'last complete checkpoint: checkpoint_2 (step 80, …)'."""
        shown = []
        for save in self.in_flight.values():
            ranks = ", ".join(_rank_text(save.ranks[rank]) for rank in sorted(save.ranks))
            shown.append(f"{_name(save.path)} (step {save.step}) being written: {ranks}")
        last = self.last_complete
        if last is not None:
            how = f"training waited {last.blocked_s:.2f} s, published after {last.total_s:.2f} s"
            shown.append(f"last complete checkpoint: {_name(last.path)} (step {last.step}, {how})")
        elif self.in_flight:
            shown.append("last complete checkpoint: none yet")
        return shown

    def text(self) -> str:
        return "\n".join(self.lines())

    def bundle(self) -> dict[str, Any]:
        """text/plain and text/html for a display output updated in place."""
        rows = "".join(f"<div>{escape(line)}</div>" for line in self.lines())
        html = f'<div class="nl-checkpoints" style="font-size:12px;color:#555">{rows}</div>'
        return {"text/plain": self.text(), "text/html": html}


def _rank_text(report: CheckpointWriting) -> str:
    written = report.written_bytes / MB
    if report.state == "failed":
        return f"rank {report.rank} failed after {written:.1f} MB"
    if report.state == "written":
        return f"rank {report.rank} written ({written:.1f} MB)"
    return f"rank {report.rank} {written:.1f} of {report.staged_bytes / MB:.1f} MB"


def _name(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]
