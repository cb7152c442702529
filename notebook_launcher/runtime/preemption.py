"""Graceful preemption inside a worker: SIGTERM (a scheduler about to preempt) or SIGUSR1 (SLURM's
warning before a time limit) asks the run to stop after the current step, and every rank agrees on
the same step, so none is left waiting in a collective while the others save and return.

The request is a flag set by the signal handler. The agreement is one tiny all_reduce (max) of that
flag at every optimizer step that updates the weights (the points where all ranks already meet):
`accelerator.preempted` turns true on every rank after the same step. A process whose function never
created an Accelerator keeps the old meaning of the signal (it ends at once), and a second signal of
the same kind ends it at once too: a loop that never checks is not left unkillable.
"""

from __future__ import annotations

import os
import signal
from typing import Any

from . import telemetry

PREEMPTION_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)

_requested: int | None = None  # the signal that asked, until the ranks agree
_agreed = False
_listening = False  # an Accelerator exists in this process: it will check the flag


def install_handlers() -> None:
    """Route SIGTERM and SIGUSR1 to the request flag (the launcher's worker calls this first thing)."""
    for signum in PREEMPTION_SIGNALS:
        signal.signal(signum, _on_signal)


def listen() -> None:
    """An Accelerator was created: from now on the signals ask for a graceful stop."""
    global _listening
    _listening = True


def _on_signal(signum: int, _frame: Any) -> None:
    global _requested
    if not _listening or _requested == signum or _agreed:
        # Nobody checks (no Accelerator), asked twice, or already stopping: the signal's own meaning.
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    _requested = signum


def requested() -> bool:
    """This process got a preemption signal (the ranks may not have agreed yet)."""
    return _requested is not None


def preempted() -> bool:
    """Every rank agreed to stop: True on all ranks after the same optimizer step."""
    return _agreed


def agree(device: Any = None) -> bool:
    """Called by every rank at the same point (each optimizer step): whether any rank was asked to stop.

    A collective over the default process group when there is one; it costs one scalar all_reduce.
    """
    global _agreed
    if _agreed:
        return True
    flag = _requested is not None
    import torch
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        tensor = torch.tensor([1 if flag else 0], dtype=torch.int32, device=device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        flag = bool(tensor.item())
    if flag:
        _agreed = True
        telemetry.emit("preempted", signal=signal.Signals(_requested).name if _requested else None)
    return _agreed


def restart_count() -> int:
    """Which attempt this is: 0 for the first start, n after n restarts (torchrun's variable)."""
    try:
        return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    except ValueError:
        return 0


def reset() -> None:
    """Start clean (a worker forked from a kernel that ran an Accelerator in_process)."""
    global _requested, _agreed, _listening
    _requested, _agreed, _listening = None, False, False
