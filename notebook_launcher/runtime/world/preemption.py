"""Graceful preemption inside a worker: SIGTERM (a scheduler about to preempt) or SIGUSR1 (SLURM's
warning before a time limit) asks the run to stop after the current step, and every rank agrees on
the same step, so none is left waiting in a collective while the others save and return.

The request is a flag set by the signal handler. The agreement is one tiny all_reduce (max) of that
flag at optimizer steps that update the weights (the points where all ranks already meet):
`accelerator.preempted` turns true on every rank after the same step. Not at every step: a collective
per step would cost every run (and, on GPUs, a device sync per step) for a signal that rarely comes.
The ranks check about once per CHECK_SECONDS: at each check rank 0 proposes how many steps until the
next one from its measured step time, and the same all_reduce hands that number to every rank, so all
ranks keep meeting at the same steps. A process whose function never
created an Accelerator keeps the old meaning of the signal (it ends at once), and a second signal of
the same kind ends it at once too: a loop that never checks is not left unkillable.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from ...records.names import GRACEFUL_PREEMPTION_ENV, PREEMPTION_CHECK_ENV
from ...system.signals import PREEMPTION_REQUEST_SIGNAL, signal_name
from .. import telemetry

# A scheduler's (SIGTERM, SIGUSR1 before SLURM's time limit) and a node launcher's own request, which
# it sends when the scheduler's signals are blocked in its workers (clusters/slurm_preemption.py).
PREEMPTION_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, PREEMPTION_REQUEST_SIGNAL)
CHECK_SECONDS = 1.0
"""About how often the ranks agree on a request: a stop comes at most ~1 s (or one step) after the signal.
NOTEBOOK_LAUNCHER_PREEMPTION_CHECK_SECONDS changes it (0: at every optimizer step)."""
MAX_CHECK_INTERVAL = 10_000

_requested: int | None = None  # the signal that asked, until the ranks agree
_agreed = False
_listening = False  # an Accelerator exists in this process: it will check the flag
_steps = 0  # optimizer steps seen by agree()
_next_check = 1  # the step at which every rank meets in the next all_reduce
_last_check: tuple[int, float] | None = None  # (step, time) of the previous check
checks = 0  # how many agreement all_reduces this process took part in


_owner: int | None = None  # the process the handlers are for; its children (DataLoader workers) are not


def install_handlers() -> None:
    """Route SIGTERM and SIGUSR1 to the request flag (the launcher's worker calls this first thing)."""
    global _owner
    _owner = os.getpid()
    for signum in PREEMPTION_SIGNALS:
        signal.signal(signum, _on_signal)


def install_handlers_if_asked() -> None:
    """In a worker of `notebook-launcher launch`, once an Accelerator is made (a plain torchrun script,
    which never asked for it, keeps the signals' own meaning)."""
    if os.environ.get(GRACEFUL_PREEMPTION_ENV) == "1" and _owner != os.getpid():
        install_handlers()


def listen() -> None:
    """An Accelerator was created: from now on the signals ask for a graceful stop."""
    global _listening
    _listening = True


def _on_signal(signum: int, _frame: Any) -> None:
    global _requested
    if not _listening or _requested == signum or _agreed or os.getpid() != _owner:
        # Nobody checks (no Accelerator), asked twice, already stopping, or a process the worker started
        # (a DataLoader worker inherits the handler, but only the worker checks): the signal's own meaning.
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

    With several ranks, a collective over the default process group about once per CHECK_SECONDS
    (one two-element all_reduce); between checks it costs nothing.
    """
    global _agreed, _steps, _next_check, _last_check, checks
    if _agreed:
        return True
    _steps += 1
    flag = _requested is not None
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        if _steps < _next_check:
            return False
        import torch

        # [request, steps until the next check]: rank 0 proposes the interval, MAX hands it to all
        proposal = _proposed_interval() if dist.get_rank() == 0 else 0
        tensor = torch.tensor([1 if flag else 0, proposal], dtype=torch.int64, device=device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        flag, interval = bool(tensor[0].item()), int(tensor[1].item())
        _next_check = _steps + max(1, interval)
        _last_check = (_steps, time.monotonic())
        checks += 1
    if flag:
        _agreed = True
        telemetry.emit("preempted", signal=signal_name(_requested) if _requested else None)
    return _agreed


def _proposed_interval() -> int:
    """Steps that take about CHECK_SECONDS at the pace since the previous check (1 before it is known)."""
    every = _check_seconds()
    if _last_check is None or every <= 0:
        return 1
    steps, since = _steps - _last_check[0], time.monotonic() - _last_check[1]
    if since <= 0:
        return MAX_CHECK_INTERVAL
    return int(min(MAX_CHECK_INTERVAL, max(1, every * steps / since)))


def _check_seconds() -> float:
    try:
        return float(os.environ.get(PREEMPTION_CHECK_ENV, CHECK_SECONDS))
    except ValueError:
        return CHECK_SECONDS


def restart_count() -> int:
    """Which attempt this is: 0 for the first start, n after n restarts (torchrun's variable)."""
    try:
        return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    except ValueError:
        return 0


def reset() -> None:
    """Start clean (a worker forked from a kernel that ran an Accelerator in_process)."""
    global _requested, _agreed, _listening, _steps, _next_check, _last_check, checks
    _requested, _agreed, _listening = None, False, False
    _steps, _next_check, _last_check, checks = 0, 1, None, 0
