"""How much memory this process holds, how much the machine (or its cgroup) allows, and a way to
let freed memory go back to the system. Linux reads /proc and /sys; elsewhere what `resource`
offers. No torch import: the launcher, the CLI and the benchmarks use it.

What "resident" means for a forked worker: right after fork the child's RSS already counts the
pages it shares with its parent (torch's libraries, the kernel's heap), so a worker's RSS starts
at a few hundred MiB before it allocates anything. `ProcessMemory.rss_since(start)` and the
benchmark count the growth above the worker's own starting point: what the training added.
"""

from __future__ import annotations

import ctypes
import os
import resource
import sys
from dataclasses import dataclass
from pathlib import Path

from ..records.names import MEMORY_LIMIT_ENV, MMAP_THRESHOLD_ENV

LIMIT_ENV = MEMORY_LIMIT_ENV  # bytes (or 8G, 512M): warn against this, not the machine
# The mmap threshold: a size applies it in every worker; 0 nowhere; unset, sharded strategies only.
THRESHOLD_ENV = MMAP_THRESHOLD_ENV
MMAP_THRESHOLD = 1 << 20
DYNAMIC_CEILING = 32 << 20  # where glibc's own threshold stops rising (64-bit)
UNDONE_TRIM_THRESHOLD = 1 << 30  # with the threshold undone: the heap's top shrinks at phase boundaries
_M_MMAP_THRESHOLD = -3  # glibc mallopt parameters
_M_TRIM_THRESHOLD = -1
_fixed_here = False  # whether this process, or the one it was forked from, fixed the threshold


@dataclass(frozen=True)
class ProcessMemory:
    rss: int  # resident bytes now (VmRSS)
    peak_rss: int  # the most resident bytes so far (VmHWM), since start or the last reset_peak()


@dataclass(frozen=True)
class MemoryLimit:
    """The limit the OOM killer enforces for this process, and how much of it is in use."""

    limit: int
    used: int
    source: str  # "cgroup v2", "cgroup v1", "machine" or LIMIT_ENV

    @property
    def fraction(self) -> float:
        return self.used / self.limit if self.limit > 0 else 0.0


def process_memory() -> ProcessMemory:
    """This process's resident and peak resident bytes."""
    status = _read_kib_fields(Path("/proc/self/status"), ("VmRSS", "VmHWM"))
    if status:
        return ProcessMemory(status.get("VmRSS", 0), status.get("VmHWM", status.get("VmRSS", 0)))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    peak = peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB elsewhere
    return ProcessMemory(peak, peak)


def reset_peak() -> bool:
    """Start the peak (VmHWM) over from the current RSS (Linux >= 4.0); False where impossible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def memory_limit() -> MemoryLimit:
    """The cgroup's limit when the process runs in a limited cgroup, else the machine's memory."""
    override = os.environ.get(LIMIT_ENV)
    machine = _machine()
    if override:
        return MemoryLimit(parse_bytes(override, LIMIT_ENV), machine.used, LIMIT_ENV)
    return _cgroup_v2() or _cgroup_v1() or machine


def threshold_from_env() -> int | None:
    """NOTEBOOK_LAUNCHER_MMAP_THRESHOLD: None when unset, 0 for "leave glibc alone", else bytes."""
    raw = os.environ.get(THRESHOLD_ENV, "").strip()
    if not raw:
        return None
    try:
        return parse_bytes(raw, THRESHOLD_ENV)
    except ValueError:
        return 0  # "0" (or nonsense): leave glibc alone


def return_freed_memory_to_os(threshold: int | None = None) -> bool:
    """Make glibc hand every freed block of >= `threshold` bytes (default 1 MiB) back to the system
    at once (mallopt M_MMAP_THRESHOLD).

    By default glibc raises its mmap threshold each time a large block is freed, so the memory of
    freed tensors stays in the heap: RSS then shows the high-water mark, and the heap fragments.
    With a fixed threshold large tensors are mapped and unmapped, so the peak is that of the
    tensors alive together — but each such tensor then costs fresh page faults every time it is
    made (a 1024-wide MLP trained 25 % slower, issue 25). So this is not done in every worker:
    sharded strategies ask for it when the Accelerator is created (memory is why they were chosen), and
    NOTEBOOK_LAUNCHER_MMAP_THRESHOLD asks for it everywhere (a size) or nowhere (0).
    False where not glibc, or when the variable says 0."""
    asked = threshold_from_env()
    if asked == 0:
        return False
    size = asked or threshold or MMAP_THRESHOLD
    global _fixed_here
    try:
        fixed = bool(_libc().mallopt(_M_MMAP_THRESHOLD, size))
    except (OSError, AttributeError):
        return False
    _fixed_here = _fixed_here or fixed
    return fixed


def apply_threshold_if_asked() -> bool:
    """At a worker's start: the process-wide threshold only where NOTEBOOK_LAUNCHER_MMAP_THRESHOLD
    names a size. Unset, a worker allocates exactly as a plain process does (issue 25)."""
    asked = threshold_from_env()
    if asked:
        return return_freed_memory_to_os(asked)
    if _fixed_here and asked is None:
        _undo_inherited_threshold()
    return False


def _undo_inherited_threshold() -> None:
    """A worker forked from a process that fixed the threshold (a kernel that built an FSDP
    Accelerator itself) inherits it. glibc cannot return to its rising threshold once it was fixed;
    its ceiling — where a plain process's threshold ends up once large blocks were freed — is the
    nearest: blocks up to 32 MiB come from the heap and are reused without page faults. The heap's
    top is left to the phase boundaries' trims (runtime/memory_phases.py): trimmed at every free
    above 64 MiB (twice the ceiling, glibc's own rule) it still gave 127 of 200 MiB back at `del`
    in tests/test_memory_live.py, where a plain process gives none."""
    global _fixed_here
    try:
        libc = _libc()
        libc.mallopt(_M_MMAP_THRESHOLD, DYNAMIC_CEILING)
        libc.mallopt(_M_TRIM_THRESHOLD, UNDONE_TRIM_THRESHOLD)
        _fixed_here = False
    except (OSError, AttributeError):
        pass


def trim_freed_memory() -> bool:
    """Give the free pages inside glibc's heaps back to the system now (malloc_trim(0)).

    One walk of the heap, paid once where it is called — after `prepare`, a checkpoint, an epoch —
    instead of on every allocation: memory freed there (a full copy of the model, a state dict)
    leaves RSS, while the blocks a training step reuses stay where the step finds them after the
    first step following the trim. False where not glibc."""
    try:
        return bool(_libc().malloc_trim(0))
    except (OSError, AttributeError):
        return False


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL("libc.so.6")


def parse_bytes(text: str, name: str = "value") -> int:
    """'8G', '512M', '1.5GiB', '1000000' -> bytes."""
    raw = str(text).strip().upper().removesuffix("IB").removesuffix("B")
    scale = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}.get(raw[-1:], 1)
    number = raw[:-1] if raw[-1:] in "KMGT" and raw else raw
    try:
        value = float(number) * scale
    except ValueError:
        raise ValueError(
            f"{name}={text!r} is not an amount of memory; write e.g. 8G, 512M or 1000000."
        ) from None
    if value <= 0:
        raise ValueError(f"{name}={text!r} must be positive.")
    return int(value)


def format_bytes(n: float) -> str:
    """1.2 GiB, 340 MiB, 12 KiB."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            value = n / size
            return f"{value:.1f} {unit}" if value < 100 else f"{value:.0f} {unit}"
    return f"{int(n)} B"


# ----------------------------------------------------------------------------- readers
def _read_kib_fields(path: Path, names: tuple[str, ...]) -> dict[str, int]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    found = {}
    for line in lines:
        key, _, rest = line.partition(":")
        if key in names and rest.split():
            found[key] = int(rest.split()[0]) * 1024
    return found


def _machine() -> MemoryLimit:
    info = _read_kib_fields(Path("/proc/meminfo"), ("MemTotal", "MemAvailable"))
    total = info.get("MemTotal")
    if total is None:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return MemoryLimit(total, 0, "machine")
    return MemoryLimit(total, total - info.get("MemAvailable", total), "machine")


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _inactive_file(stat: Path, key: str) -> int:
    """Page cache the kernel drops before killing anything (not counted as used)."""
    try:
        for line in stat.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key and value.strip().isdigit():
                return int(value)
    except OSError:
        pass
    return 0


def _cgroup_path(proc: Path, controller: str) -> str | None:
    """This process's cgroup path for a controller ("" = the unified v2 hierarchy)."""
    try:
        lines = proc.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers.split(",") == [controller] or (controller and controller in controllers.split(",")):
            return path
    return None


def _tightest(folder: Path, root: Path, read) -> MemoryLimit | None:
    """Walk from this process's cgroup up to the root; the limit with the least room left."""
    best: MemoryLimit | None = None
    while True:
        found = read(folder)
        if found is not None and (best is None or found.limit - found.used < best.limit - best.used):
            best = found
        if folder == root or root not in folder.parents:
            return best
        folder = folder.parent


def _v2_at(folder: Path) -> MemoryLimit | None:
    limit = _read_int(folder / "memory.max")  # "max" (no limit) reads as None
    current = _read_int(folder / "memory.current")
    if limit is None or current is None:
        return None
    return MemoryLimit(
        limit, max(0, current - _inactive_file(folder / "memory.stat", "inactive_file")), "cgroup v2"
    )


def _v1_at(folder: Path) -> MemoryLimit | None:
    limit = _read_int(folder / "memory.limit_in_bytes")
    usage = _read_int(folder / "memory.usage_in_bytes")
    if limit is None or usage is None or limit >= 2**60:  # "no limit" is a huge number in v1
        return None
    used = max(0, usage - _inactive_file(folder / "memory.stat", "total_inactive_file"))
    return MemoryLimit(limit, used, "cgroup v1")


def _cgroup_v2(
    root: Path = Path("/sys/fs/cgroup"), proc: Path = Path("/proc/self/cgroup")
) -> MemoryLimit | None:
    path = _cgroup_path(proc, "")
    if path is None or not (root / "cgroup.controllers").exists():
        return None
    return _tightest(root / path.lstrip("/"), root, _v2_at)


def _cgroup_v1(
    root: Path = Path("/sys/fs/cgroup/memory"), proc: Path = Path("/proc/self/cgroup")
) -> MemoryLimit | None:
    path = _cgroup_path(proc, "memory")
    if path is None or not root.is_dir():
        return None
    folder = root / path.lstrip("/")
    return _tightest(folder if folder.is_dir() else root, root, _v1_at)
