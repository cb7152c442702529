"""One rank's activity record: which collective it is in and how many it has entered.

A rank stuck in a gloo collective runs no Python (so no signal handler can answer), but the launcher
can still read a small file the rank keeps current: one fixed-size record, rewritten on entry to and
exit from each collective (runtime/world/collective_log.py decides when). Writing it costs a struct
pack into a shared page, no system call; reading it is one read of 72 bytes. Here the format, the
writer and the reader; no torch, so the launcher reads it without loading the runtime.
"""

from __future__ import annotations

import mmap
import os
import struct
import time
from dataclasses import dataclass

from .names import ACTIVITY_FILE_ENV

ENV = ACTIVITY_FILE_ENV  # set by the launcher: where each rank keeps its record
IDLE, IN_COLLECTIVE, RENDEZVOUS = 0, 1, 2
_FORMAT = struct.Struct("<iiqd48s")  # state, unused, collectives entered, entered at (time.time()), op
RECORD_SIZE = _FORMAT.size


@dataclass(frozen=True)
class Activity:
    """One rank's record as the launcher reads it."""

    state: int
    count: int  # collectives entered so far; the one it is in (if any) is number `count`
    op: str
    since: float  # time.time() when it entered that collective (or the rendezvous)

    @property
    def in_collective(self) -> bool:
        return self.state == IN_COLLECTIVE

    @property
    def in_rendezvous(self) -> bool:
        return self.state == RENDEZVOUS


def read_record(path: str) -> Activity | None:
    """The record a rank keeps at `path`; None before it wrote one."""
    try:
        with open(path, "rb") as file:
            data = file.read(RECORD_SIZE)
    except OSError:
        return None
    if len(data) < RECORD_SIZE:
        return None
    state, _, count, since, op = _FORMAT.unpack(data)
    return Activity(state, count, op.rstrip(b"\0").decode("ascii", "replace"), since)


class ActivityWriter:
    """The rank's side: the shared page and the running count."""

    def __init__(self, path: str) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            os.ftruncate(fd, RECORD_SIZE)
            self.page = mmap.mmap(fd, RECORD_SIZE)
        finally:
            os.close(fd)
        self.count = 0

    def write(self, state: int, op: str, count: int | None = None) -> None:
        _FORMAT.pack_into(
            self.page, 0, state, 0, self.count if count is None else count, time.time(), op.encode()[:48]
        )

    def enter(self, op: str) -> None:
        self.count += 1
        self.write(IN_COLLECTIVE, op)

    def leave(self, op: str) -> None:
        self.write(IDLE, op)
