"""A child process that dies with the process that started it (Linux's PR_SET_PDEATHSIG).

Every process our launchers start that would otherwise outlive a killed parent asks for this: a
notebook worker (its kernel), a node launcher (its agent), a Ray driver (its kernel), a CLI worker
(the launcher). Without it a kernel killed with SIGKILL leaves processes holding GPUs. The death
signal follows the *thread* that started the child: the child dies when that thread ends, so each
launcher starts these children from a thread that lives as long as the run.
"""

from __future__ import annotations

import ctypes
import signal
import sys

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent() -> bool:
    """Ask Linux to SIGKILL this process when the thread that started it ends; False where it cannot
    (not Linux, or no prctl in the C library), so the caller can say or check what it relies on."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL) == 0
    except (OSError, AttributeError):
        return False
