"""GPU check (run when a GPU is lent; never part of the suite): a kernel that holds CUDA launches
through the warm pool, its workers take GPU memory, the kernel is SIGKILLed (the OOM killer's way) —
and the device's memory is free again within seconds, for the next kernel.

    python benchmarks/gpu_kernel_death.py

Prints the device's free memory before, during and after, and FAILS (exit 1) if the workers'
memory did not come back within GONE_WITHIN seconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from kernel_session import KernelSession  # noqa: E402

GONE_WITHIN = 15.0
HOLD_GIB = 4

_PROBE = "import torch; free, total = torch.cuda.mem_get_info(); print(free / 2**30)"

_CELL = f"""
import torch
torch.zeros(1, device="cuda")  # the kernel holds CUDA: "auto" picks the warm pool
from notebook_launcher import start_launch

def hold():
    import time, torch
    from notebook_launcher import Accelerator
    accelerator = Accelerator()
    block = torch.empty({HOLD_GIB} * 2**30, dtype=torch.uint8, device=accelerator.device)
    open(f"holding-{{accelerator.process_index}}", "w").close()
    time.sleep(600)

handle = start_launch(hold, num_processes=1, view=False)
"""


def free_gib() -> float:
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def main() -> int:
    workdir = Path(os.environ.get("TMPDIR", "/tmp")) / f"gpu-kernel-death-{os.getpid()}"
    workdir.mkdir()
    before = free_gib()
    session = KernelSession(cwd=str(workdir))
    run = session.run(_CELL, timeout=300)
    if run.error is not None:
        print(run.text, run.error)
        return 1
    deadline = time.monotonic() + 300
    while not (workdir / "holding-0").exists():
        if time.monotonic() > deadline:
            print("the worker never allocated its memory")
            return 1
        time.sleep(0.5)
    during = free_gib()
    os.kill(session.pid, signal.SIGKILL)
    killed = time.monotonic()
    after = during
    while time.monotonic() - killed < GONE_WITHIN:
        after = free_gib()
        if after >= before - 0.5:
            break
    print(
        f"free GiB: before {before:.1f}, while the worker holds {HOLD_GIB} GiB {during:.1f}, "
        f"{time.monotonic() - killed:.1f} s after the kernel's SIGKILL {after:.1f}"
    )
    ok = after >= before - 0.5
    print("PASS: the GPU memory came back" if ok else "FAIL: the GPU memory is still held")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
