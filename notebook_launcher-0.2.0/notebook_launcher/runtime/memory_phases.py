"""Host memory given back at the training's phase boundaries, never on its hot path (issue 25).

A worker allocates as a plain process does: glibc keeps freed blocks in its heap, where the next
step finds them without page faults. Memory is given back where a phase ends and its garbage is
known to be large:
- after `prepare` (a full copy of the model, sharded or moved away, is garbage now);
- after `save_state` / `load_state` (state dicts, file buffers);
- at the end of an epoch of a prepared DataLoader (at most once every TRIM_EVERY_S seconds, so
  many short epochs cost nothing measurable);
- in `accelerator.free_memory()` and `release_memory()` (the user says a phase ended).
Strategies that shard the model (FSDP, DeepSpeed ZeRO, a device mesh) also make glibc map and
unmap every block of >= 1 MiB from the Accelerator's creation on: their peak memory is why the
user chose them, and without it freed gathered weights fragment the heap (docs/sharding.md has
the figures; each such tensor then costs page faults, so their CPU steps are slower).
NOTEBOOK_LAUNCHER_MMAP_THRESHOLD=0 keeps glibc's behaviour for them too; a size applies that
threshold in every worker.
"""

from __future__ import annotations

import time
from typing import Any

from ..system.host_memory import return_freed_memory_to_os, trim_freed_memory

TRIM_EVERY_S = 5.0  # the fewest seconds between two trims at epoch ends
_last_trim = float("-inf")


def phase_ended(*, rate_limited: bool = False) -> bool:
    """Give the heap's free pages back now; with `rate_limited`, only if the last trim is
    TRIM_EVERY_S old. Returns whether a trim ran."""
    global _last_trim
    now = time.monotonic()
    if rate_limited and now - _last_trim < TRIM_EVERY_S:
        return False
    _last_trim = now
    trim_freed_memory()
    return True


def strategy_chosen(strategy: Any) -> None:
    """When the Accelerator is built: a sharded strategy returns large blocks from now on, so
    `sharded_init()`, `prepare` and the steps after them all peak at what is alive."""
    if getattr(strategy, "shards_weights", False):
        return_freed_memory_to_os()
