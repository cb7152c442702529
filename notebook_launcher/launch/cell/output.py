"""Workers' output in the calling cell, at notebook speed: rank-prefixed lines, live lines, progress
bars and rich displays.

A flood of lines must not become a flood of messages (Jupyter drops output beyond 1,000 messages a
second, and each message costs the page): lines are gathered and written in one go at most every
FLUSH_SECONDS, in the order they came; what updates in place (tqdm bars, "\\r" lines, the tail
of a rank that printed more than LINES_SHOWN lines) is redrawn at most every REDRAW_SECONDS, all
ranks in one output each. Everything a rank printed also goes to its log file (rank_logs.py).
Sources call `tick()` from their wait loops so nothing stays unshown while the ranks are quiet.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections import Counter, deque
from collections.abc import Iterable
from typing import Any

from ...errors import ConfigError
from ..events import (
    BarUpdate,
    HangReported,
    MemoryWarning,
    OutputLine,
    RunFinished,
    RunRestarting,
    RunStarted,
    WorkerDisplay,
)
from .checkpoint_view import CheckpointBoard
from .progress_view import bars_bundle, prune
from .rank_logs import RankLogs
from .surface import cell_surface

LINES_SHOWN = 200  # a rank's first lines, streamed into the cell as they come
TAIL_LINES = 20  # after that: its last lines, in one output updated in place
FLUSH_SECONDS = 0.1
REDRAW_SECONDS = 0.25
ROLE_NAME = "default"  # torchrun's role for its workers, the value of {role_name}


def check_prefix_template(template: str | None) -> str | None:
    """torchrun's log_line_prefix_template, once it fills with torchrun's fields ({role_name},
    {rank}, {local_rank}); an error naming the bad field."""
    if template is None:
        return None
    try:
        str(template).format(role_name=ROLE_NAME, rank=0, local_rank=0)
    except (KeyError, IndexError, ValueError) as exc:
        raise ConfigError(
            f"log_line_prefix_template={template!r} cannot be filled ({type(exc).__name__}: {exc}); use torchrun's "
            "fields only, e.g. '[{role_name}{rank}|{local_rank}]: '."
        ) from None
    return str(template)


class CellPrinter:
    """Observer that shows a launch's (or a %%ranks cell's) events in this process's cell."""

    def __init__(
        self,
        show_ranks: int | Iterable[int] | None = None,
        prefix: bool = True,
        lines_shown: int = LINES_SHOWN,
        logs_name: str | None = "result.logs",
        only_displays: bool = False,
        template: str | None = None,
    ) -> None:
        if isinstance(show_ranks, int):
            show_ranks = [show_ranks]
        self.show_ranks = None if show_ranks is None else set(show_ranks)
        self.prefix = prefix
        self.lines_shown = lines_shown
        self.logs_name = logs_name  # how the caller reaches every line (None: only the files)
        self.only_displays = only_displays  # a RunView shows the rest (lines, bars)
        self.template = check_prefix_template(template)  # torchrun's log_line_prefix_template
        self.local_ranks: tuple[int, ...] = ()
        self.surface = cell_surface()
        self.logs = RankLogs()
        self._begin()

    def _begin(self) -> None:
        self._chunks: list[tuple[str, str]] = []
        self._count: Counter[int] = Counter()
        self._tails: dict[int, deque[str]] = {}
        self._live: dict[int, str] = {}
        self._bars: dict[tuple[int, int], BarUpdate] = {}
        self._folded = 0
        self._checkpoints = CheckpointBoard()  # the save in flight, the last complete one
        self._updates: dict[str, WorkerDisplay] = {}
        self._display_ranks: set[int] = set()
        self._dirty: set[str] = set()
        self._flushed = self._drawn = 0.0
        self._ids = f"notebook-launcher-{uuid.uuid4().hex[:8]}"

    # ------------------------------------------------------------------ events
    def __call__(self, event: object) -> None:
        if self.only_displays and not isinstance(event, (WorkerDisplay, RunFinished)):
            return
        if self._checkpoints.apply(event):  # the save in flight, the last complete one (in place)
            self._dirty.add("checkpoints")
        if isinstance(event, RunStarted):
            self.local_ranks = tuple(event.local_ranks)
        elif isinstance(event, OutputLine):
            self._line(event)
        elif isinstance(event, BarUpdate):
            self._bar(event)
        elif isinstance(event, WorkerDisplay):
            self._display(event)
        elif isinstance(event, RunFinished):
            self.finish()
            return
        elif isinstance(event, HangReported) and event.report.reason == "stall":
            self._say(event.report.text())  # a timeout's report comes with LaunchTimeout
        elif isinstance(event, RunRestarting):
            self._say(f"notebook_launch: {event.text}")
        elif isinstance(event, MemoryWarning):  # one line, whatever ranks are shown
            self._say(f"notebook_launcher: {event.text}")
        self.tick()

    def _shown(self, rank: int) -> bool:
        return self.show_ranks is None or rank in self.show_ranks

    def _label(self, rank: int) -> str:
        if not self.prefix:
            return ""
        if self.template is None:
            return f"[rank{rank}] "
        local = self.local_ranks.index(rank) if rank in self.local_ranks else rank
        return self.template.format(role_name=ROLE_NAME, rank=rank, local_rank=local)

    def _line(self, event: OutputLine) -> None:
        rank = event.rank
        if event.live:
            if self._shown(rank) and self._live.get(rank) != event.text:
                self._live[rank] = event.text
                self._dirty.add("live")
            return
        self.logs.write(rank, event.text + "\n")
        if not self._shown(rank):
            return
        if self._live.pop(rank, None) is not None:
            self._dirty.add("live")
        self._count[rank] += 1
        if self._count[rank] <= self.lines_shown:
            self._chunks.append((event.stream, self._label(rank) + event.text + "\n"))
        else:
            self._tails.setdefault(rank, deque(maxlen=TAIL_LINES)).append(event.text)
            self._dirty.add("tail")

    def _bar(self, event: BarUpdate) -> None:
        if not self._shown(event.rank):
            return
        key = (event.rank, event.bar)
        if event.closed and not event.leave:
            self._bars.pop(key, None)
        else:
            self._bars[key] = event
            self._folded += prune(self._bars)
        self._dirty.add("bars")

    def _display(self, event: WorkerDisplay) -> None:
        if not self._shown(event.rank):
            return
        self._flush_streams()
        if event.clear:
            self.surface.clear(event.wait)
            self._dirty.update(("bars", "live", "tail"))  # drawn anew below what replaces the cleared
            return
        self._display_ranks.add(event.rank)
        data, metadata = self._labelled(event)
        display_id = None if event.display_id is None else f"{self._ids}-r{event.rank}-{event.display_id}"
        if event.update and display_id is not None:
            self._updates[display_id] = WorkerDisplay(event.rank, data, metadata, display_id, True)
            self._dirty.add("updates")
            return
        self.surface.publish(data, metadata, display_id, False)

    def _labelled(self, event: WorkerDisplay) -> tuple[dict[str, Any], dict[str, Any]]:
        """The rank's label goes on its displays once more than one rank displays."""
        data = dict(event.data)
        metadata = {**event.metadata, "notebook_launcher": {"rank": event.rank}}
        if len(self._display_ranks) > 1 and self.prefix:
            label = f"[rank{event.rank}]"
            if "text/plain" in data:
                data["text/plain"] = f"{label} {data['text/plain']}"
            if "text/html" in data:
                data["text/html"] = f'<div style="opacity:0.7"><code>{label}</code></div>{data["text/html"]}'
            if "text/markdown" in data:
                data["text/markdown"] = f"`{label}`\n\n{data['text/markdown']}"
        return data, metadata

    def _say(self, text: str) -> None:
        self._flush_streams()
        self.surface.write("stderr", text + "\n")
        self.surface.flush()

    # ----------------------------------------------------------------- drawing
    def tick(self) -> None:
        """Write what is due: lines every FLUSH_SECONDS, in-place outputs every REDRAW_SECONDS."""
        now = time.monotonic()
        if self._chunks and now - self._flushed >= FLUSH_SECONDS:
            self._flush_streams()
        if self._dirty and now - self._drawn >= REDRAW_SECONDS:
            self._redraw()

    def _flush_streams(self) -> None:
        self._flushed = time.monotonic()
        if not self._chunks:
            return
        stream = self._chunks[0][0]
        parts: list[str] = []
        for chunk_stream, text in self._chunks:
            if chunk_stream != stream:
                self.surface.write(stream, "".join(parts))
                stream, parts = chunk_stream, []
            parts.append(text)
        self.surface.write(stream, "".join(parts))
        self._chunks.clear()
        self.surface.flush()
        self.logs.flush()

    def _redraw(self, final: bool = False) -> None:
        self._drawn = time.monotonic()
        self._flush_streams()
        dirty, self._dirty = self._dirty, set()
        if "updates" in dirty:
            for display_id, update in self._updates.items():
                self.surface.publish(update.data, update.metadata, display_id, True)
            self._updates.clear()
        if "bars" in dirty and (self._bars or final):
            self.surface.show(
                f"{self._ids}-bars", bars_bundle(self._bars.values(), self._folded, self.prefix), final
            )
        if "live" in dirty and self.surface.live:
            text = "\n".join(self._label(rank) + line for rank, line in sorted(self._live.items()))
            self.surface.show(f"{self._ids}-live", {"text/plain": text})
        if "tail" in dirty:
            self.surface.show(f"{self._ids}-tail", {"text/plain": self._tail_text()}, final)
        if "checkpoints" in dirty and not self._checkpoints.empty:
            self.surface.show(f"{self._ids}-checkpoints", self._checkpoints.bundle(), final)

    def _tail_text(self) -> str:
        parts = []
        for rank, tail in sorted(self._tails.items()):
            left_out = self._count[rank] - self.lines_shown - len(tail)
            where = [f"{self.logs_name}[{rank}]"] if self.logs_name else []
            path = self.logs.path(rank)
            where += [str(path)] if path is not None else []
            note = f"… {left_out:,} more lines of rank {rank} not shown here" if left_out > 0 else ""
            note += f"{'; ' if note else ''}all of them: {' and '.join(where)}; the last {len(tail)}:"
            parts.append(self._label(rank) + note)
            parts += [self._label(rank) + line for line in tail]
        return "\n".join(parts)

    def finish(self) -> None:
        """The end of a launch or of a %%ranks command: everything shown, live lines removed, files
        closed; the printer starts afresh for the next one."""
        if self._live:
            self._live.clear()
            self.surface.show(f"{self._ids}-live", {"text/plain": ""})
        self._dirty.discard("live")
        shown = (("bars", self._bars), ("tail", self._tails), ("checkpoints", not self._checkpoints.empty))
        self._dirty.update(name for name, held in shown if held)
        if self._dirty:
            self._redraw(final=True)
        self._flush_streams()
        self.logs.close()
        self.logs = RankLogs()
        self._begin()
        sys.stdout.flush()
