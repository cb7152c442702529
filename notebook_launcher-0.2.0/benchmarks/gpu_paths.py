"""GPU-path checks for a machine with a CUDA GPU (run by benchmarks/gpu_check.py, or alone):

    python benchmarks/gpu_paths.py

The test suite covers each of these on CPU through its mechanism (tests/test_gpu_paths.py,
tests/test_nothing_ignored.py); here they run for real. Each check prints one PASS/FAIL line with
what it saw. Checks that need a fresh kernel (CUDA touched in the parent) run in a subprocess, so
this process never initialises CUDA and its own launches can fork.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import traceback

import torch

from notebook_launcher import notebook_launch


def _report(name: str, ok: bool, seen: object) -> None:
    print(f"{'PASS' if ok else 'FAIL'} {name}: {seen}", flush=True)


def _in_fresh_kernel(code: str) -> str:
    """Run code in a new interpreter (a stand-in for a kernel) and return its last output line."""
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=600
    )
    lines = (out.stdout.strip() or out.stderr.strip() or "(no output)").splitlines()
    return lines[-1]


# ----------------------------------------------------------------------------------------------
def _return_cuda_tensors():
    from notebook_launcher import Accelerator

    accelerator = Accelerator()
    accelerator.log({"vector": torch.arange(3.0, device=accelerator.device)}, step=0)
    gathered = accelerator.gather_for_metrics(torch.ones(2, device=accelerator.device))
    return {
        "value": torch.ones(4, device=accelerator.device),
        "gathered": gathered,
        "sent": str(accelerator.device),
    }


def check_results_arrive_on_cpu() -> None:
    result = notebook_launch(_return_cuda_tensors, num_processes=1, quiet=True, timeout=300)
    value = result[0]
    seen = (
        value["sent"],
        value["value"].device.type,
        value["gathered"].device.type,
        result.metrics[0]["vector"].device.type,
        torch.cuda.is_initialized(),
    )
    _report(
        "results/metrics/gathered come back on CPU, kernel CUDA untouched",
        seen[1:] == ("cpu",) * 3 + (False,),
        seen,
    )


SPAWN_PAYLOAD = """
import torch
from notebook_launcher import notebook_launch
def where(x):
    import torch
    return str(x.device), torch.cuda.memory_allocated()
x = torch.ones(1024, 1024, device="cuda")  # the kernel holds a CUDA tensor: spawn, x on CPU
result = notebook_launch(where, args=(x,), num_processes=1, timeout=300)
print(result.start_method, result[0])
"""


def check_spawn_payload_on_cpu() -> None:
    line = _in_fresh_kernel(SPAWN_PAYLOAD)
    _report(
        "spawn sends captured CUDA tensors on CPU (worker allocates nothing)",
        line == "spawn ('cpu', 0)",
        line,
    )


DRIVER_HAZARD = """
import torch
torch.cuda.is_available()  # no NVML check: the driver is initialised, torch.cuda is not
from notebook_launcher import notebook_launch
from notebook_launcher.system import hardware
def device():
    from notebook_launcher import Accelerator
    return str(Accelerator().device)
hazard = hardware.cuda_fork_hazard() is not None
auto = notebook_launch(device, num_processes=1, quiet=True, timeout=300)
hardware.cuda_fork_hazard = lambda: None  # a parent that missed it: the worker must say so itself
try:
    notebook_launch(device, num_processes=1, start_method="fork", quiet=True, timeout=300)
    worker = "no error"
except Exception as error:
    worker = "explained" if "start_method='spawn'" in str(error) else type(error).__name__
print(torch.cuda.is_initialized(), hazard, auto.start_method, auto[0], worker)
"""


def check_driver_hazard() -> None:
    line = _in_fresh_kernel(DRIVER_HAZARD)
    _report(
        "is_available() without NVML: spawn chosen; a forked worker explains",
        line == "False True spawn cuda:0 explained",
        line,
    )


def _device_and_type():
    import os

    from notebook_launcher import Accelerator

    accelerator = Accelerator()
    return (
        str(accelerator.device),
        accelerator.distributed_type.value,
        accelerator.state.backend,
        os.environ.get("CUDA_VISIBLE_DEVICES"),
    )


def check_gpu_ids_and_cpu_choice() -> None:
    by_ids = notebook_launch(_device_and_type, gpu_ids="0", quiet=True, timeout=300)
    _report("gpu_ids='0' -> 1 process on cuda:0", list(by_ids) == [("cuda:0", "NO", None, "0")], list(by_ids))
    cpu = notebook_launch(
        _device_and_type, num_processes=2, distributed_type="MULTI_CPU", quiet=True, timeout=300
    )
    ok = [r[:3] for r in cpu] == [("cpu", "MULTI_CPU", "gloo")] * 2
    _report("distributed_type=MULTI_CPU stays on CPU on a GPU machine", ok, list(cpu))


def _fsdp_state_dict():
    from notebook_launcher import Accelerator

    accelerator = Accelerator()
    model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(8)])
    model = accelerator.prepare(model)
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    state = accelerator.get_state_dict(model)
    peak = torch.cuda.max_memory_allocated() - before
    model_bytes = sum(t.numel() * t.element_size() for t in state.values())
    return {t.device.type for t in state.values()}, peak / model_bytes


def check_fsdp_state_dict_on_cpu() -> None:
    result = notebook_launch(
        _fsdp_state_dict, num_processes=1, distributed_type="FSDP", quiet=True, timeout=300
    )
    devices, peak_fraction = result[0]
    # One GPU allows one FSDP rank (NCCL refuses two ranks on a GPU), so the peak is a figure to read,
    # not a verdict: with several ranks it is what cpu_offload keeps from growing to the whole model.
    _report(
        "FSDP get_state_dict returns CPU tensors (devices, GPU peak / model bytes)",
        devices == {"cpu"},
        (devices, round(peak_fraction, 3)),
    )


def _deepspeed_fp16_overflow():
    from notebook_launcher import Accelerator

    accelerator = Accelerator()
    model = torch.nn.Linear(16, 16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = []
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: steps.append(s) or 1.0)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    skipped, counted = 0, len(steps)
    for step in range(6):
        x = torch.randn(4, 16, device=accelerator.device, dtype=torch.half)
        loss = model(x).float().pow(2).mean() * (float("inf") if step == 3 else 1.0)
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        skipped += accelerator.optimizer_step_was_skipped
    return skipped, len(steps) - counted, 6


def check_deepspeed_overflow_keeps_the_scheduler() -> None:
    result = notebook_launch(
        _deepspeed_fp16_overflow,
        num_processes=1,
        distributed_type="DEEPSPEED",
        mixed_precision="fp16",
        deepspeed_config={"zero_stage": 2},
        quiet=True,
        timeout=600,
    )
    skipped, scheduler_steps, steps = result[0]
    ok = skipped >= 1 and scheduler_steps == steps - skipped
    _report(
        "DeepSpeed fp16: overflowed steps do not step the scheduler (skipped, scheduler steps, steps)",
        ok,
        result[0],
    )


CHECKS = [
    check_results_arrive_on_cpu,
    check_spawn_payload_on_cpu,
    check_driver_hazard,
    check_gpu_ids_and_cpu_choice,
    check_fsdp_state_dict_on_cpu,
    check_deepspeed_overflow_keeps_the_scheduler,
]


def run_all() -> None:
    from notebook_launcher.system.hardware import detect

    if not detect().has_cuda:
        print("SKIP GPU paths: no CUDA GPU here (the suite covers their mechanism on CPU).")
        return
    for check in CHECKS:
        try:
            check()
        except Exception:
            print(f"FAIL {check.__name__}: raised", flush=True)
            traceback.print_exc()


if __name__ == "__main__":
    run_all()
