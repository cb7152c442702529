"""A start that never forms: every rank of a one-machine launch sits inside init_process_group.

On one machine the rendezvous takes milliseconds: every rank is there, and they meet in a file
(system/store.py). When all of them have waited in it together for RENDEZVOUS_STALL_SECONDS, the
process group will not form. What issue 38 found holding ranks there: torch's TCPStore connect
doing a reverse DNS lookup of the store's address, 5 s for each query the DNS server drops (py-spy:
getnameinfo under SocketImpl), while the peer waits in gloo for that rank's address; a server that
drops query after query holds it longer. Ranks of our launches no longer connect over TCP; code
that calls init_process_group itself still does.
Nothing of the user's training has run yet, so the launcher stops those ranks and starts them once
more with a fresh store, never silently: said in the cell, warned, and counted in result.failures
(restarts.py). Launches whose ranks span machines are not watched:
there a rank waiting for another machine to join is normal.

Also a rank still waiting in the rendezvous after another rank of the same world has returned: the
group cannot form any more (the returned rank never joins), so that wait is a failure at once, which
max_restarts may restart, instead of a hang (Accelerate's test_fault_tolerant can end so).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ...errors import ConfigError
from ...records.activity import Activity
from ...records.names import RENDEZVOUS_STALL_ENV
from ..result import RankFailure

ENV = RENDEZVOUS_STALL_ENV
DEFAULT_SECONDS = 60.0
RETRIES = 1  # starts again after a stalled rendezvous, on top of (and not counted in) max_restarts
CHECK_EVERY = 0.5  # seconds between two reads of the ranks' records
ORPHAN_SECONDS = 2.0  # a rank's wait in the rendezvous after a peer returned (that took ms) before it fails


def stall_seconds() -> float | None:
    """How long all ranks may wait in the rendezvous together; None when the user turned it off (0)."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return DEFAULT_SECONDS
    try:
        seconds = float(raw)
    except ValueError:
        raise ConfigError(
            f"{ENV}={raw!r} is not a number of seconds; set e.g. {ENV}=60, or 0 to never restart a stalled start."
        ) from None
    return seconds if seconds > 0 else None


def all_waiting_since(activities: Mapping[int, Activity | None]) -> float | None:
    """When the last rank entered the rendezvous, if every rank is in it now; else None."""
    if not activities or any(a is None or not a.in_rendezvous for a in activities.values()):
        return None
    return max(a.since for a in activities.values() if a is not None)


class RendezvousWatch:
    """Asked by the supervisor's loop; reads the ranks' records at most every CHECK_EVERY seconds."""

    def __init__(self, all_ranks_local: bool) -> None:
        self.seconds = stall_seconds() if all_ranks_local else None
        self._next_check = 0.0
        self._next_orphan_check = 0.0  # its own clock: stalled() is asked first in the same loop

    def stalled(self, read: Callable[[], Mapping[int, Activity | None]]) -> bool:
        """`read()` gives each rank's activity (HangWatch.activities)."""
        if self.seconds is None or time.monotonic() < self._next_check:
            return False
        self._next_check = time.monotonic() + CHECK_EVERY
        since = all_waiting_since(read())
        return since is not None and time.time() - since > self.seconds

    def orphaned(
        self, read: Callable[[], Mapping[int, Activity | None]], workers: Sequence[Any]
    ) -> RankFailure | None:
        """The failure of a rank waiting in the rendezvous that a rank which already returned never
        joins (workers: the supervisor's, with .rank, .exited, .reported); None when there is none."""
        returned = [w.rank for w in workers if w.exited and w.reported]
        if self.seconds is None or not returned or time.monotonic() < self._next_orphan_check:
            return None
        self._next_orphan_check = time.monotonic() + CHECK_EVERY
        running = {w.rank for w in workers if not w.exited}
        for rank, activity in read().items():
            if rank in running and activity is not None and activity.in_rendezvous:
                if time.time() - activity.since > ORPHAN_SECONDS:
                    return RankFailure(
                        rank=rank,
                        time=time.monotonic(),
                        description=(
                            f"rank {rank} waited in the rendezvous (init_process_group), but rank {returned[0]} had "
                            "already returned without joining it: the process group cannot form. Every rank must "
                            "reach the same init_process_group (Accelerator(), PartialState()) or none"
                        ),
                    )
        return None
