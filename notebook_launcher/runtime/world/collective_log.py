"""Which collective this rank is in, and how many it has entered: the hang report's evidence.

A rank stuck in a gloo collective runs no Python (so no signal handler can answer), but the launcher
can still read a small file this rank keeps current: one fixed-size record, rewritten on entry to and
exit from every collective that goes through `torch.distributed`'s functions (the runtime's ops and
the Accelerator's gather/reduce/barrier call them as the user's own code does) and around
`init_process_group` (the rendezvous). Writing it costs a struct pack into a shared page, no system
call. DDP's gradient all-reduce runs in C++ and is not counted; the stack shows it.

The record's format, writer and reader are torch-free in records/activity.py, which the launcher
reads without this module; here only when to write it (no torch import at module level either).
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from typing import Any

from ...records.activity import ENV, IDLE, IN_COLLECTIVE, RENDEZVOUS, Activity, ActivityWriter, read_record
from . import step_clock

__all__ = ["COLLECTIVES", "ENV", "IDLE", "IN_COLLECTIVE", "RENDEZVOUS", "Activity", "install", "read_record"]

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


_record: ActivityWriter | None = None
_this_thread = threading.local()  # .not_counted: a background thread's collectives (checkpoint writer)


def not_counted_in_this_thread() -> None:
    """The calling thread's collectives are left out of the record: they run on their own group
    beside the training's (the asynchronous checkpoint's writer), and counting them would make the
    ranks' counts differ by timing alone."""
    _this_thread.not_counted = True


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
            _record = ActivityWriter(path)
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
        if record is None or getattr(_this_thread, "not_counted", False):
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
