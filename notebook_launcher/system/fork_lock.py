"""One lock for this process's own warm-up imports and its forks, so that they never overlap.

A child forked while another thread of its parent is importing a module inherits that module's
import lock, held by a thread the child does not have: the child hangs the first time it imports
that module. Two launches started in threads of a fresh process showed it: one forked its rank
while the other was importing torch._dynamo (launch/warm/warmup.py), and the rank, whose
init_process_group imports torch._dynamo, waited until the launch's timeout.

Imports that other code (the user's threads) does meanwhile are not covered: only ours can be.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

_lock = threading.RLock()  # re-entrant: a nested use in the same thread cannot deadlock


def _fresh_in_child() -> None:
    """A forked child never leaves the `with` its parent forked in: it gets a lock of its own."""
    global _lock
    _lock = threading.RLock()


os.register_at_fork(after_in_child=_fresh_in_child)


@contextlib.contextmanager
def fork_lock() -> Iterator[None]:
    """Held around each warm-up import and each start of a worker process by this process."""
    with _lock:
        yield
