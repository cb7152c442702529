"""The worker side of live memory: a daemon thread that sends this rank's memory to the launcher.

Every `interval` seconds (NOTEBOOK_LAUNCHER_MEMORY_INTERVAL, default 1; 0 turns it off) one small
"memory" message goes through the worker's channel: resident and peak resident bytes, the
machine's (or cgroup's) limit and use, and on a GPU the bytes torch has allocated, its peak and
the device's total. Reading /proc/self/status takes microseconds; CUDA is only asked when this
process has initialised it already (the sampler never creates a CUDA context). The last sample
is sent when the function returns, so the peak in `result.memory` is the run's true peak.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

from ...records.names import MEMORY_INTERVAL_ENV
from ...system.host_memory import memory_limit, process_memory

INTERVAL_ENV = MEMORY_INTERVAL_ENV
DEFAULT_INTERVAL = 1.0


def sample() -> dict[str, Any]:
    """One memory sample of this process (plain numbers, picklable)."""
    own = process_memory()
    limit = memory_limit()
    found: dict[str, Any] = {
        "time": time.time(),
        "rss": own.rss,
        "peak_rss": own.peak_rss,
        "used": limit.used,
        "limit": limit.limit,
        "limit_source": limit.source,
    }
    found.update(_gpu())
    return found


def _gpu() -> dict[str, int]:
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return {}
    index = _cuda_index(torch)
    try:
        free, total = torch.cuda.mem_get_info(index)
        return {
            "gpu_allocated": int(torch.cuda.memory_allocated(index)),
            "gpu_reserved": int(torch.cuda.memory_reserved(index)),
            "gpu_peak": int(torch.cuda.max_memory_allocated(index)),
            "gpu_used": int(total - free),
            "gpu_total": int(total),
        }
    except Exception:  # a sampler must never disturb training
        return {}


def _cuda_index(torch: Any) -> int:
    """The GPU this rank trains on: the runtime state's device (the current device is per thread)."""
    state_module = sys.modules.get("notebook_launcher.runtime.world.state")
    state = getattr(state_module, "_STATE", None)
    device = getattr(state, "device", None)
    if device is not None and device.type == "cuda" and device.index is not None:
        return int(device.index)
    return int(os.environ.get("LOCAL_RANK", "0")) % max(1, torch.cuda.device_count())


def interval_from_env() -> float:
    raw = os.environ.get(INTERVAL_ENV, "")
    try:
        return max(0.0, float(raw)) if raw.strip() else DEFAULT_INTERVAL
    except ValueError:
        return DEFAULT_INTERVAL


class MemorySampler:
    """Samples every `interval` seconds in a daemon thread, sending through `send(kind, payload)`."""

    def __init__(self, send: Any, interval: float | None = None) -> None:
        self.send = send
        self.interval = interval_from_env() if interval is None else interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> MemorySampler:
        if self.interval > 0:
            self._thread = threading.Thread(target=self._run, name="notebook_launcher-memory", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self._send_one()
            self._stop.wait(self.interval)

    def stop(self) -> None:
        """Stop sampling and send one last sample (the peak as it stands at the end)."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=2 * self.interval + 1)
        self._thread = None
        self._send_one()

    def _send_one(self) -> None:
        try:
            self.send("memory", sample())
        except Exception:  # a broken pipe at shutdown must not raise into the worker
            pass
