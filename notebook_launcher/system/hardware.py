"""What the machine has, found without initialising CUDA in the caller.

A notebook kernel that initialises CUDA can no longer fork workers safely, so GPU facts come from
NVML (torch's `PYTORCH_NVML_BASED_CUDA_CHECK`) and, for names and capabilities, from a short-lived
subprocess. Results are cached per process.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field


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


def threads_per_rank(ranks_here: int, requested: int | None = None) -> int | None:
    """CPU threads for each rank on this machine: the one rule for every entry (notebook_launch,
    %%ranks, cluster nodes, the CLI's --num_cpu_threads_per_process). The number asked for, else the
    user's OMP_NUM_THREADS, else this machine's cores shared out; None when the user's variable is
    not a number (OpenMP then reads it as written)."""
    if requested is not None:
        return max(1, requested)
    user_value = os.environ.get("OMP_NUM_THREADS")
    if not user_value:
        return max(1, cpu_count() // max(1, ranks_here))
    try:
        return max(1, int(user_value))
    except ValueError:
        return None


def cuda_device_count() -> int:
    """Number of visible CUDA devices, counted through NVML so CUDA stays uninitialised here.

    torch.cuda.device_count() falls back to the CUDA driver when NVML cannot count (MIG devices,
    a broken NVML), which would initialise the driver in the kernel and break forked workers.
    That fallback is never taken here: -1 means "NVML could not tell", and detect() then asks a
    child process instead. A machine without NVIDIA's driver answers 0 before torch is imported,
    so a launch on it needs no torch in the kernel (issue 34).
    """
    try:
        ctypes.CDLL("libnvidia-ml.so.1")  # what torch's NVML count loads first
    except OSError:
        return 0  # no NVIDIA driver on this machine (e.g. a CUDA build of torch on a CPU machine)
    import torch

    if not torch.backends.cuda.is_built():
        return 0
    nvml_count = getattr(torch.cuda, "_device_count_nvml", None)
    if nvml_count is None:  # a torch without the NVML helper: let the child process count
        return -1
    try:
        return int(nvml_count())
    except Exception:
        return -1


def visible_gpu_count(gpu_ids: str | None, hardware: HardwareInfo) -> int:
    """GPUs a run may use: the ones gpu_ids lists ("0,2" -> 2), else every GPU detected."""
    if gpu_ids and str(gpu_ids).strip().lower() != "all":
        return len([i for i in str(gpu_ids).split(",") if i.strip()])
    return hardware.cuda_device_count


def cuda_initialized() -> bool:
    """True when this process already holds a CUDA context (so forking workers is unsafe)."""
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


_CUDA_SUCCESS = 0
_LIBCUDA = re.compile(r"/\S*/libcuda\.so[.\d]*$")


def loaded_libcuda(maps_text: str | None = None) -> str | None:
    """The path of the CUDA driver library when this process has loaded it (never loads it)."""
    if maps_text is None:
        try:
            with open("/proc/self/maps") as maps:
                maps_text = maps.read()
        except OSError:
            return None
    for line in maps_text.splitlines():
        found = _LIBCUDA.search(line.strip())
        if found:
            return found.group(0)
    return None


def cuda_driver_initialized() -> bool:
    """True when the CUDA driver was initialised in this process, even if torch's CUDA was not.

    torch.cuda.is_available() without PYTORCH_NVML_BASED_CUDA_CHECK=1, a MIG GPU (torch counts it
    through the driver) or another CUDA library calls cuInit while torch.cuda.is_initialized()
    stays False; a forked child then fails with "Cannot re-initialize CUDA in forked subprocess".
    The driver library is only loaded by such a call, so: not loaded -> not initialised; loaded ->
    ask it (cuDeviceGetCount answers CUDA_ERROR_NOT_INITIALIZED before cuInit and initialises
    nothing). When no answer can be had, say True: spawn is always safe.
    """
    path = loaded_libcuda()
    if path is None:
        return False
    try:
        driver = ctypes.CDLL(path, mode=getattr(os, "RTLD_NOLOAD", 0) | ctypes.RTLD_GLOBAL)
        count = ctypes.c_int(0)
        return driver.cuDeviceGetCount(ctypes.byref(count)) == _CUDA_SUCCESS
    except (OSError, AttributeError):
        return True


def cuda_fork_hazard() -> str | None:
    """Why forking workers from this process would break their CUDA, or None when it is safe."""
    if cuda_initialized():
        return "this kernel has already initialised CUDA"
    if cuda_driver_initialized():
        return (
            "this kernel has already initialised the CUDA driver (torch.cuda.is_initialized() is False, but "
            "something called the driver: torch.cuda.is_available() without PYTORCH_NVML_BASED_CUDA_CHECK=1, "
            "a MIG GPU counted through the driver, or another CUDA library)"
        )
    return None


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
    """Detect CPUs, CUDA GPUs and MPS once; safe to call in a notebook kernel before forking, and
    torch-free outside macOS (MPS exists only there; only torch can say whether it is usable)."""
    gpus = _probe_gpus() if cuda_device_count() != 0 else ()  # -1: NVML could not count; the child can
    return HardwareInfo(cpu_count=cpu_count(), gpus=gpus, mps_available=sys.platform == "darwin" and _mps())


def _mps() -> bool:
    import torch

    return bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())


def ranks_run_on_cpu(use_cpu: bool) -> bool:
    """Whether a launch's ranks will compute on CPUs: asked for (use_cpu), or no GPU here."""
    return bool(use_cpu) or detect().cuda_device_count == 0
