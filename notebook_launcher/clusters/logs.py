"""Follow one SLURM node's files while its job runs: the task's stdout/stderr logs (rank lines
written as `[rankN] text`) and its events file (the ranks' other events, notes), turned back into the
launch events a local run produces. Every event of the ranks travels in one form (encode_event):
its class's name and fields, for each class in launch/events.py's WORKER_EVENTS. A requeued job
may start its logs afresh: a file that got shorter is read again from its start."""

from __future__ import annotations

import collections
import dataclasses
import json
import re
from pathlib import Path
from typing import Any

from ..launch.events import WORKER_EVENTS, OutputLine, Stream

RANK_LINE = re.compile(r"^\[rank(\d+)\] (.*)$", re.S)
TAIL_LINES = 40
EVENT_KIND = "event"  # a line of the events file holding one of the ranks' events
_EVENT_TYPES = {cls.__name__: cls for cls in WORKER_EVENTS}


def encode_event(event: Any) -> dict[str, Any]:
    """One of the ranks' events as JSON-ready data: its class's name and its fields (the values as
    they are: the events file's writer turns what JSON cannot hold into its repr)."""
    fields = {field.name: getattr(event, field.name) for field in dataclasses.fields(event)}
    return {"type": type(event).__name__, "fields": fields}


def decode_event(payload: dict[str, Any]) -> Any:
    """The event encode_event wrote (None for a class this version does not relay)."""
    cls = _EVENT_TYPES.get(payload.get("type", ""))
    return None if cls is None else cls(**payload["fields"])


class _Tail:
    """New complete lines of a growing file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""

    def lines(self) -> list[str]:
        try:
            size = self.path.stat().st_size
        except OSError:
            return []
        if size < self.offset:  # rewritten (a requeued job)
            self.offset, self.partial = 0, b""
        if size == self.offset:
            return []
        with open(self.path, "rb") as handle:
            handle.seek(self.offset)
            data = handle.read(size - self.offset)
        self.offset += len(data)
        *complete, self.partial = (self.partial + data).split(b"\n")
        return [line.decode("utf-8", errors="replace") for line in complete]


class LogFollower:
    def __init__(self, node: int, stdout: Path, stderr: Path, events: Path) -> None:
        self.node = node
        self.streams: dict[Stream, _Tail] = {"stdout": _Tail(stdout), "stderr": _Tail(stderr)}
        self.events = _Tail(events)
        self.recent: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)

    def read(self) -> tuple[list[Any], list[str]]:
        """(launch events, notes for the cell) written since the last call."""
        events: list[Any] = []
        notes: list[str] = []
        for stream, tail in self.streams.items():
            for line in tail.lines():
                self.recent.append(line)
                match = RANK_LINE.match(line)
                if match:
                    events.append(OutputLine(int(match.group(1)), stream, match.group(2)))
        for line in self.events.lines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            event, note = _decode(record)
            if event is not None:
                events.append(event)
            if note:
                notes.append(note)
        return events, notes

    def tail(self) -> str:
        """The last lines of the node's logs (what SLURM or the setup commands said, too)."""
        self.read()
        return "\n".join(self.recent)


def _decode(record: dict[str, Any]) -> tuple[Any, str | None]:
    kind, payload = record.get("kind"), record.get("payload") or {}
    if kind == EVENT_KIND:
        return decode_event(payload), None
    if kind == "note":
        return None, str(payload)
    if kind == "requeue":
        return None, _requeue_note(payload)
    if kind == "start" and payload.get("restarts"):
        return None, f"started again on {payload.get('host')} (requeue {payload['restarts']})."
    return None, None


def _requeue_note(payload: dict[str, Any]) -> str:
    """One line: preempted (by which signals), how the ranks stopped, requeued, where it resumes from."""
    signals = ", ".join(payload.get("signals") or []) or "SLURM's signal"
    checkpoint = payload.get("checkpoint")
    if payload.get("graceful"):
        how = "every rank stopped after the same step (accelerator.preempted)" + (
            f" and saved {checkpoint}" if checkpoint else ", without saving a checkpoint"
        )
    else:
        how = "the ranks were stopped (the function did not return on accelerator.preempted)"
    return (
        f"preempted or at its time limit ({signals}): {how}; requeued by submitit. The function starts "
        "again and resumes from its latest checkpoint if it loads one (accelerator.load_state())."
    )
