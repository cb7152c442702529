"""Which collective this rank is in, and how many it has entered: the hang report's evidence.

A rank stuck in a gloo collective runs no Python (so no signal handler can answer), but the launcher
can still read a small file this rank keeps current: one fixed-size record, rewritten on entry to and
exit from every collective that goes through `torch.distributed`'s functions (the runtime's ops and
the Accelerator's gather/reduce/barrier call them as the user's own code does) and around
`init_process_group` (the rendezvous). Writing it costs a struct pack into a shared page, no system
call. DDP's gradient all-reduce runs in C++ and is not counted; the stack shows it.

No torch import at module level: the launcher reads records with `read_record` without torch.
"""

from __future__ import annotations

import functools
import mmap
import os
import struct
import sys
import time
from dataclasses import dataclass
from typing import Any

from . import step_clock

ENV = "NOTEBOOK_LAUNCHER_ACTIVITY_FILE"  # set by the launcher: where this rank keeps its record
IDLE, IN_COLLECTIVE, RENDEZVOUS = 0, 1, 2
_FORMAT = struct.Struct("<iiqd48s")  # state, unused, collectives entered, entered at (time.time()), op
RECORD_SIZE = _FORMAT.size

# torch.distributed's collectives as users and our runtime call them (point-to-point is left out:
# its counts differ between ranks by design).
COLLECTIVES = (
    "all_reduce",
    "broadcast",
    "barrier",
    "monitored_barrier",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "gather",
    "gather_object",
    "scatter",
    "scatter_object_list",
    "broadcast_object_list",
    "all_to_all",
    "all_to_all_single",
)


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


class _Record:
    """This rank's side: the shared page and the running count."""

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


_record: _Record | None = None


def install() -> bool:
    """Keep this rank's record (when the launcher asked for one) and count torch.distributed's
    collectives from now on; whether counting is on. Needs torch imported already: a worker that
    never imports torch has no collective to report, and this must not import it for them."""
    global _record
    path = os.environ.get(ENV)
    if not path or "torch" not in sys.modules:
        return False
    if _record is None:
        try:
            _record = _Record(path)
        except OSError:
            return False
        _record.write(IDLE, "")
        _wrap_torch_distributed()
    return True


def _wrap_torch_distributed() -> None:
    """Replace torch.distributed's public collectives by counting wrappers (the names users call;
    torch's own internal calls go through distributed_c10d and are not counted twice)."""
    import torch.distributed as dist

    if not dist.is_available():
        return
    for name in COLLECTIVES:
        original = getattr(dist, name, None)
        if original is not None and not getattr(original, "_counted", False):
            setattr(dist, name, _counting(name, original))
    original_init = dist.init_process_group
    if not getattr(original_init, "_counted", False):
        dist.init_process_group = _in_rendezvous(original_init)


def _counting(name: str, original: Any) -> Any:
    @functools.wraps(original)
    def counted(*args: Any, **kwargs: Any) -> Any:
        record = _record
        if record is None:
            return original(*args, **kwargs)
        record.enter(name)
        began = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            record.leave(name)
            step_clock.CLOCK.add("wait", time.perf_counter() - began)

    counted._counted = True  # type: ignore[attr-defined]
    return counted


def _in_rendezvous(original: Any) -> Any:
    @functools.wraps(original)
    def joining(*args: Any, **kwargs: Any) -> Any:
        record = _record
        if record is not None:
            record.write(RENDEZVOUS, "init_process_group")
        try:
            return original(*args, **kwargs)
        finally:
            if record is not None:
                record.write(IDLE, "")

    joining._counted = True  # type: ignore[attr-defined]
    return joining
