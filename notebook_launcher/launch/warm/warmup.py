"""Imports done once in the kernel, so that forked workers share them instead of each paying.

A forked worker inherits every module the kernel has imported; what the kernel has not imported,
each worker imports on its own, on every launch. Three tiers:

- light (torch.distributed, DDP's module, our runtime; ~0.1 s): imported before the first fork;
- torch._dynamo, which DDP's first construction imports (~1 s, the bulk of a first launch). In a
  Jupyter kernel it is imported while the kernel is idle, right after the first launch's cell, so
  the first launch does not wait for it (a DDP worker of that first launch imports it itself) and
  every later launch forks with it. Outside a kernel (a script) there is no idle time to use: it
  is imported before the first fork.
- deepspeed (~10 s per worker) and what its initialize() imports on first use (~2.4 s): before a
  DEEPSPEED launch, on machines without GPUs only.

Before every forked launch, whether or not the kernel imported torch itself: each worker imports
our runtime, and torch with it, before the user's function runs, so a kernel without torch would
make every launch pay that import in every worker, on every relaunch.
Launches that do not fork (spawn, the warm pool) leave the kernel without torch.

Never initialises CUDA: importing these modules does not touch the driver.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from ...system.fork_lock import fork_lock

_LIGHT_DONE = False
_HEAVY_STATE = "not started"  # "scheduled" (kernel idle callback pending), "done"


def warm_up(config: Any = None) -> None:
    """Before a forked launch: the light imports now, the heavy one now or at the kernel's next idle.
    Each import here holds the fork lock: a launch in another thread forks before or after it, never
    while it holds its module's import lock (system/fork_lock.py)."""
    global _LIGHT_DONE
    if not _LIGHT_DONE:
        with fork_lock():
            import torch.distributed  # noqa: F401
            import torch.nn.parallel  # noqa: F401

            import notebook_launcher.runtime  # noqa: F401

            _LIGHT_DONE = True
    if _HEAVY_STATE == "not started" and not _schedule_when_idle():
        import_heavy()
    if config is not None and config.distributed_type == "DEEPSPEED":
        warm_up_deepspeed()


def import_heavy() -> None:
    """torch._dynamo, imported by DDP's first construction (~1.3 s per worker when not shared)."""
    global _HEAVY_STATE
    _HEAVY_STATE = "done"
    with fork_lock(), _environ_kept():  # importing torch._dynamo sets TORCHINDUCTOR_CACHE_DIR in the kernel
        try:
            import torch._dynamo  # noqa: F401
        except Exception:  # noqa: BLE001 - a worker that needs it reports the real error
            pass


@contextlib.contextmanager
def _environ_kept() -> Iterator[None]:
    """The kernel's os.environ as it was, whatever the imports inside set: the user's environment
    is theirs (torch sets variables at import; a worker sets its own when it needs them)."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        for key in set(os.environ) - set(saved):
            del os.environ[key]
        os.environ.update(saved)


def _schedule_when_idle() -> bool:
    """Ask a Jupyter kernel's event loop to run import_heavy() once it is idle; False outside one.

    The callback runs on the kernel's main thread between cells, so it never races the user's own
    imports (a background thread could); a launch forking in another thread meanwhile waits for it
    (system/fork_lock.py).
    """
    global _HEAVY_STATE
    loop = _kernel_event_loop()
    if loop is None:
        return False
    try:
        loop.call_later(0.2, import_heavy)
    except Exception:  # noqa: BLE001 - an event loop we do not know: import now instead
        return False
    _HEAVY_STATE = "scheduled"
    return True


def _kernel_event_loop() -> Any:
    if "IPython" not in sys.modules:
        return None
    try:
        from IPython import get_ipython

        kernel = getattr(get_ipython(), "kernel", None)
        return getattr(kernel, "io_loop", None)
    except Exception:  # noqa: BLE001
        return None


# What deepspeed.initialize() imports on first use, in every worker of every launch unless the kernel
# has: its optimizer check imports the Muon optimizer, whose module applies torch.compile at import
# time and so loads torch._inductor (~2.4 s per worker, on every DeepSpeed launch, measured here).
DEEPSPEED_FIRST_USE_IMPORTS = ("deepspeed.runtime.zero.muon.muon_optimizer",)


def warm_up_deepspeed() -> None:
    """Importing deepspeed takes ~10 s per worker; do it once here — on CPU-only machines only,
    because on a GPU machine its accelerator probing could touch the CUDA driver in the kernel."""
    import importlib

    from ...system.hardware import detect

    if detect().cuda_device_count == 0:
        with fork_lock(), _environ_kept():  # importing deepspeed sets variables; the kernel keeps its own
            try:
                import deepspeed  # noqa: F401

                for name in DEEPSPEED_FIRST_USE_IMPORTS:
                    try:
                        importlib.import_module(name)
                    except Exception:  # another DeepSpeed version: the workers import what they need
                        pass
            except Exception:
                pass  # the strategy reports a missing or broken install with the fix
