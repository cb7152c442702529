"""A process group for sharded strategies, even in a single process.

FSDP2 and DeepSpeed both need an initialised default group. A launch of several processes has one
already (state.py makes it); a single process (notebook_launch with num_processes=1, or a plain
script) gets a one-rank group backed by an in-memory store, so no address or port is needed and the
same code paths (DTensors, ZeRO partitions, checkpoints) run at world size 1. The group is marked
as owned by the process state, so `end_training()` / `reset_state()` tear it down.
"""

from __future__ import annotations

from typing import Any

import torch.distributed as dist

from ..world.state import ProcessState


def ensure_process_group(state: ProcessState) -> None:
    """Initialise a one-rank default group when none exists (world size 1 only)."""
    if dist.is_initialized():
        return
    if state.world_size != 1:
        raise RuntimeError(
            f"world size {state.world_size} but no process group: create the Accelerator before any "
            "other distributed call."
        )
    backend = "nccl" if state.device.type == "cuda" else "gloo"
    kwargs: dict[str, Any] = {"device_id": state.device} if state.device.type == "cuda" else {}
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, **kwargs)
    state.backend = backend
    state.owns_process_group = True
