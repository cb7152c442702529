"""The launcher side of live memory: keep every rank's samples, and warn before the OOM killer.

`MemoryWatch.ingest(rank, sample)` stores the sample (it ends up in `result.memory`) and returns
the events to send to observers: always a MemorySampled, and a MemoryWarning the first time the
machine (or the cgroup the workers run in) has WARN_FRACTION of its limit in use, or a GPU has
GPU_WARN_FRACTION of its memory in use. The warning names the rank holding the most memory and
says what to change; it is printed once in the cell and shown in the RunView's status.
"""

from __future__ import annotations

from typing import Any

from ...system.host_memory import LIMIT_ENV, format_bytes
from ..events import MemorySampled, MemoryWarning

WARN_FRACTION = 0.9
GPU_WARN_FRACTION = 0.95
_WHERE = {
    "machine": "this machine",
    "cgroup v1": "this container (cgroup)",
    "cgroup v2": "this container (cgroup)",
    LIMIT_ENV: f"the budget in {LIMIT_ENV}",
}
ADVICE = (
    "Before the kernel's OOM killer stops a rank: use fewer processes, FSDP or DeepSpeed ZeRO-3 with "
    "accelerator.sharded_init(), parameter/optimizer offload, or a smaller batch "
    "(notebook_launcher.estimate_memory(model) shows what each choice holds per rank)."
)


class MemoryRecord(dict):
    """`result.memory`: {rank: [samples in time order]}, each sample a dict with `time`, `rss` and
    `peak_rss` (bytes), `used`/`limit` of the machine or cgroup (`limit_source`), and on a GPU
    `gpu_allocated`, `gpu_reserved`, `gpu_peak`, `gpu_used`, `gpu_total`. `warnings` holds the
    memory warnings of the run."""

    def __init__(self) -> None:
        super().__init__()
        self.warnings: list[str] = []

    def peak_rss(self, rank: int) -> int:
        """The most resident bytes the rank reached (0 before any sample)."""
        return max((s.get("peak_rss", s.get("rss", 0)) for s in self.get(rank, [])), default=0)

    def peak_gpu(self, rank: int) -> int | None:
        """The most GPU bytes torch allocated on the rank, or None without a GPU."""
        peaks = [s["gpu_peak"] for s in self.get(rank, []) if "gpu_peak" in s]
        return max(peaks) if peaks else None


class MemoryWatch:
    def __init__(self) -> None:
        self.record = MemoryRecord()
        self._warned: set[str] = set()

    def ingest(self, rank: int, sample: dict[str, Any]) -> list[Any]:
        self.record.setdefault(rank, []).append(sample)
        events: list[Any] = [MemorySampled(rank, sample)]
        for kind, text in self._warnings(rank, sample):
            if kind not in self._warned:
                self._warned.add(kind)
                self.record.warnings.append(text)
                events.append(MemoryWarning(self._largest_rank(rank), text))
        return events

    def _warnings(self, rank: int, sample: dict[str, Any]) -> list[tuple[str, str]]:
        found = []
        used, limit = sample.get("used", 0), sample.get("limit", 0)
        if limit and used >= WARN_FRACTION * limit:
            holder = self._largest_rank(rank)
            source = sample.get("limit_source", "machine")
            where = _WHERE.get(source, f"this machine (limit from {source})")
            found.append(
                (
                    "host",
                    f"memory is running out: {format_bytes(used)} of {where}'s {format_bytes(limit)} are in use "
                    f"({used / limit:.0%}); rank {holder} holds {format_bytes(self._latest(holder, 'rss'))}. {ADVICE}",
                )
            )
        gpu_used, gpu_total = sample.get("gpu_used", 0), sample.get("gpu_total", 0)
        if gpu_total and gpu_used >= GPU_WARN_FRACTION * gpu_total:
            found.append(
                (
                    f"gpu{rank}",
                    f"GPU memory is running out on rank {rank}: {format_bytes(gpu_used)} of "
                    f"{format_bytes(gpu_total)} in use, torch holds {format_bytes(sample.get('gpu_allocated', 0))}. "
                    f"{ADVICE}",
                )
            )
        return found

    def _latest(self, rank: int, key: str) -> int:
        samples = self.record.get(rank) or [{}]
        return int(samples[-1].get(key, 0))

    def _largest_rank(self, default: int) -> int:
        if not self.record:
            return default
        return max(self.record, key=lambda r: self._latest(r, "rss"))
