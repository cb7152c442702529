"""What the machine has, found without initialising CUDA in the caller.

A notebook kernel that initialises CUDA can no longer fork workers safely, so GPU facts come from
NVML (torch's `PYTORCH_NVML_BASED_CUDA_CHECK`) and, for names and capabilities, from a short-lived
subprocess. Results are cached per process.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field

_NVML_ENV = "PYTORCH_NVML_BASED_CUDA_CHECK"


@dataclass(frozen=True)
class GPUInfo:
    index: int
    name: str
    total_memory: int
    capability: tuple[int, int]

    @property
    def supports_bf16(self) -> bool:
        return self.capability >= (8, 0)

    @property
    def supports_fp8(self) -> bool:
        return self.capability >= (8, 9)


@dataclass(frozen=True)
class HardwareInfo:
    cpu_count: int
    gpus: tuple[GPUInfo, ...] = field(default_factory=tuple)
    mps_available: bool = False

    @property
    def cuda_device_count(self) -> int:
        return len(self.gpus)

    @property
    def has_cuda(self) -> bool:
        return bool(self.gpus)

    @property
    def bf16_supported(self) -> bool:
        """bf16 autocast works on every CPU; on GPUs it needs Ampere (8.0) or newer."""
        return all(g.supports_bf16 for g in self.gpus) if self.gpus else True

    @property
    def fp16_supported(self) -> bool:
        return True

    @property
    def fp8_supported(self) -> bool:
        """fp8 training needs CUDA compute capability 8.9+ (Ada, Hopper, Blackwell)."""
        return bool(self.gpus) and all(g.supports_fp8 for g in self.gpus)

    def supported_precisions(self) -> dict[str, str | None]:
        """Each mixed-precision mode mapped to None (usable) or the reason it is not."""
        return {
            "no": None,
            "fp16": None,
            "bf16": None if self.bf16_supported else "bf16 needs a GPU of compute capability 8.0+ (Ampere)",
            "fp8": None
            if self.fp8_supported
            else "fp8 needs a CUDA GPU of compute capability 8.9+ (Ada/Hopper)",
        }


def cpu_count() -> int:
    """CPUs this process may run on (respects affinity masks and containers' cpusets)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return os.cpu_count() or 1


def cuda_device_count() -> int:
    """Number of visible CUDA devices, counted through NVML so CUDA stays uninitialised here."""
    import torch

    if not torch.backends.cuda.is_built():
        return 0
    previous = os.environ.get(_NVML_ENV)
    os.environ[_NVML_ENV] = "1"
    try:
        return int(torch.cuda.device_count())
    finally:
        if previous is None:
            os.environ.pop(_NVML_ENV, None)
        else:
            os.environ[_NVML_ENV] = previous


def cuda_initialized() -> bool:
    """True when this process already holds a CUDA context (so forking workers is unsafe)."""
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


_PROBE = (
    "import json, torch\n"
    "print(json.dumps([[i, torch.cuda.get_device_name(i), torch.cuda.get_device_properties(i).total_memory,"
    " list(torch.cuda.get_device_capability(i))] for i in range(torch.cuda.device_count())]))"
)


def _probe_gpus() -> tuple[GPUInfo, ...]:
    """GPU names and capabilities, asked in a child process so this one never creates a context."""
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        return ()
    rows = json.loads(out.stdout.strip().splitlines()[-1])
    return tuple(GPUInfo(int(i), str(n), int(m), (int(c[0]), int(c[1]))) for i, n, m, c in rows)


@functools.lru_cache(maxsize=1)
def detect() -> HardwareInfo:
    """Detect CPUs, CUDA GPUs and MPS once; safe to call in a notebook kernel before forking."""
    import torch

    gpus = _probe_gpus() if cuda_device_count() > 0 else ()
    mps = bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())
    return HardwareInfo(cpu_count=cpu_count(), gpus=gpus, mps_available=mps)
