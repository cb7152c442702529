"""One-shot GPU check of the sharded strategies (not part of the test suite; needs a CUDA GPU).

    python benchmarks/gpu_check.py            # everything, ~3-5 minutes on one recent GPU
    python benchmarks/gpu_check.py --quick    # fewer steps

Runs, through notebook_launch, on GPU 0 (world size 1, and 2 processes sharing it where the
backend allows; NCCL refuses two ranks on one GPU, and that refusal is reported as a figure too):

1. DDP over nccl (fp32)
2. FSDP FULL_SHARD, mixed_precision="bf16" (FSDP's MixedPrecisionPolicy)
3. DeepSpeed ZeRO-2, bf16
4. a ParallelismConfig mesh, tensor parallel over 2 ranks (the MLPs split), bf16 (issue 27)
   and a pipeline over 2 stages (1F1B, 4 micro-batches, an nn.Sequential of the same blocks, issue 35)
5. fp8 (torchao float8 training) on a transformer block vs bf16: which layers were converted,
   the loss after N steps, steps/s; on a GPU below compute capability 8.9 the HardwareError text.

Every section prints its figures (final loss, steps/s, peak CUDA memory) or its error, then the
next one runs. Before them, benchmarks/gpu_paths.py checks the GPU paths that the suite covers on
CPU only by their mechanism (one PASS/FAIL line each), and, with 2 GPUs, Accelerate 1.16's own test
scripts run unchanged on real Accelerate and on ours over NCCL (tests/accelerate_scripts.py, the
harness tests/test_accelerate_own_scripts.py runs on 2 CPU processes), one line per sub-test.
Paste the output into the issue note.
"""

from __future__ import annotations

import argparse
import time
import traceback

import torch
from torch import nn

from notebook_launcher import notebook_launch
from notebook_launcher.system.hardware import detect

GPU_SIZES = {"width": 1024, "heads": 16, "seq": 256, "batch": 16, "layers": 4}
DRY_RUN_SIZES = {"width": 64, "heads": 4, "seq": 8, "batch": 4, "layers": 2}


def build_model(width: int, heads: int, layers: int, **_: int) -> nn.Module:
    torch.manual_seed(0)
    blocks = [
        nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, batch_first=True)
        for _ in range(layers)
    ]
    model = nn.Sequential(nn.Linear(width, width), *blocks, nn.Linear(width, width))
    model._tp_plan = {"*.linear1": "colwise", "*.linear2": "rowwise"}  # the mesh section's split (MLPs)
    return model


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train(steps: int, sizes: dict) -> dict:
    """Regress a fixed random target; returns losses, steps/s after warm-up, peak memory, converted layers."""
    from notebook_launcher import Accelerator

    accelerator = Accelerator()
    model = build_model(**sizes)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model, optimizer = accelerator.prepare(model, optimizer)
    g = torch.Generator(device="cpu").manual_seed(accelerator.process_index)
    shape = (sizes["batch"], sizes["seq"], sizes["width"])
    x = torch.randn(shape, generator=g).to(accelerator.device)
    target = torch.randn(shape, generator=g).to(accelerator.device)

    def step():
        loss = nn.functional.mse_loss(model(x), target)
        accelerator.backward(loss)
        return loss

    losses, times = _timed_steps(accelerator, optimizer, steps, step)
    inner = accelerator.unwrap_model(model)
    converted = sorted(
        {
            type(m).__name__
            for m in inner.modules()
            if "Float8" in type(m).__name__ or type(m).__module__.startswith("transformer_engine")
        }
    )
    on_gpu = accelerator.device.type == "cuda"
    result = {
        "backend": accelerator.state.backend,
        "distributed_type": str(accelerator.distributed_type),
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "steps_per_s": (len(times) - 2) / sum(times[2:]),
        "peak_mem_gib": torch.cuda.max_memory_allocated(accelerator.device) / 2**30 if on_gpu else 0.0,
        "converted_module_types": converted,
    }
    accelerator.end_training()
    return result


def _timed_steps(accelerator, optimizer, steps: int, step) -> tuple[list[float], list[float]]:
    """Each step's loss and seconds: `step()` runs forward and backward and returns the loss."""
    losses, times = [], []
    for _ in range(steps):
        _sync(accelerator.device)
        start = time.perf_counter()
        loss = step()
        optimizer.step()
        optimizer.zero_grad()
        _sync(accelerator.device)
        times.append(time.perf_counter() - start)
        losses.append(loss.item())
    return losses, times


def train_pipeline(steps: int, sizes: dict) -> dict:
    """The same blocks as an nn.Sequential cut into pp_size stages; model.step runs the schedule."""
    from notebook_launcher import Accelerator
    from notebook_launcher.utils import TorchPipelineParallelConfig

    accelerator = Accelerator()
    pipeline = TorchPipelineParallelConfig("1f1b", n_microbatches=4, loss_fn=nn.functional.mse_loss)
    if accelerator.parallelism_config is not None:
        accelerator.parallelism_config.pp_handler = pipeline  # the loss function stays in the function
    model = nn.Sequential(*build_model(**sizes).children())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model, optimizer = accelerator.prepare(model, optimizer)
    g = torch.Generator(device="cpu").manual_seed(0)
    shape = (sizes["batch"], sizes["seq"], sizes["width"])
    x = torch.randn(shape, generator=g).to(accelerator.device)
    target = torch.randn(shape, generator=g).to(accelerator.device)
    losses, times = _timed_steps(accelerator, optimizer, steps, lambda: model.step(x, target=target))
    on_gpu = accelerator.device.type == "cuda"
    return {
        "backend": accelerator.state.backend,
        "distributed_type": f"PP stages {model.stage_ids}",
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "steps_per_s": (len(times) - 2) / sum(times[2:]),
        "peak_mem_gib": torch.cuda.max_memory_allocated(accelerator.device) / 2**30 if on_gpu else 0.0,
        "converted_module_types": [],
    }


SECTIONS = [
    ("DDP nccl fp32", {}),
    (
        "FSDP FULL_SHARD bf16",
        {
            "distributed_type": "FSDP",
            "mixed_precision": "bf16",
            "fsdp_config": {"fsdp_transformer_layer_cls_to_wrap": "TransformerEncoderLayer"},
        },
    ),
    (
        "DeepSpeed ZeRO-2 bf16",
        {"distributed_type": "DEEPSPEED", "mixed_precision": "bf16", "deepspeed_config": {"zero_stage": 2}},
    ),
    (  # tensor parallel over nccl needs one GPU per rank: with one GPU, NCCL's refusal is the figure
        "mesh TP=2 bf16",
        {"mixed_precision": "bf16", "parallelism_config": {"parallelism_config_tp_size": 2}},
    ),
    (  # one GPU per stage over nccl: with one GPU, NCCL's refusal is the figure
        "mesh PP=2 1f1b fp32",
        {"parallelism_config": {"parallelism_config_pp_size": 2}, "function": train_pipeline},
    ),
    ("bf16 (fp8 baseline)", {"mixed_precision": "bf16"}),
    ("fp8 (torchao)", {"mixed_precision": "fp8"}),
]


def run_section(name: str, options: dict, processes: int, steps: int, sizes: dict, cpu: bool) -> None:
    label = f"{name} x{processes}"
    started = time.perf_counter()
    extra = {"use_cpu": True} if cpu else {}
    options = dict(options)
    function = options.pop("function", train)
    try:
        result = notebook_launch(
            function,
            kwargs={"steps": steps, "sizes": sizes},
            num_processes=processes,
            timeout=600,
            **options,
            **extra,
        )
    except Exception as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        print(f"{label:<32} FAILED ({time.perf_counter() - started:.0f}s): {type(error).__name__}: {first}")
        return
    r = result[0]
    print(
        f"{label:<32} {r['distributed_type']:<9} {r['backend'] or '-':<5} loss {r['first_loss']:.4f} -> "
        f"{r['last_loss']:.4f}  {r['steps_per_s']:7.2f} steps/s  peak {r['peak_mem_gib']:6.2f} GiB"
        + (f"  converted: {r['converted_module_types']}" if r["converted_module_types"] else "")
    )


ACCELERATE_SCRIPTS = ["test_ops", "test_sync", "test_script", "test_distributed_data_loop"]


def _launch_harness(library: str, env: dict, timeout: float = 540) -> str:
    """One torchrun launch of tests/accelerate_scripts.py on 2 GPUs; its stdout (whatever came before a
    timeout too: the process group is killed then)."""
    import os
    import signal
    import subprocess
    import tempfile
    from pathlib import Path

    from accelerate_scripts import start

    with tempfile.TemporaryDirectory() as scratch:
        proc = start(library, ACCELERATE_SCRIPTS, cwd=Path(scratch), env=env)
        try:
            return proc.communicate(timeout=timeout)[0]
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            return (proc.communicate()[0] or "") + "\n(timed out)"


def check_accelerate_scripts() -> None:
    """Accelerate 1.16's own test scripts, unchanged, on 2 GPUs over NCCL (MULTI_GPU: test_sync's
    accumulation matrix, test_ops' copy_tensor_to_devices, the fp16 wrapper check, and
    test_distributed_data_loop run there), on real Accelerate and on ours: one line per sub-test."""
    import os
    import sys
    from pathlib import Path

    tests = Path(__file__).resolve().parent.parent / "tests"
    sys.path.insert(0, str(tests))
    from accelerate_scripts import parse_report

    env = {k: v for k, v in os.environ.items() if k != "ACCELERATE_USE_CPU"}
    env["PYTHONPATH"] = os.pathsep.join([str(tests.parent), env.get("PYTHONPATH", "")])
    env.setdefault("OMP_NUM_THREADS", "1")
    found = {library: parse_report(_launch_harness(library, env)) for library in ("accelerate", "ours")}

    def shown(ranks: dict | None) -> str:
        if not ranks:
            return "did not run"
        failed = [f"rank {r}: {m[:120]}" for r, (status, m) in sorted(ranks.items()) if status != "PASS"]
        return "PASS" if not failed and len(ranks) == 2 else "FAIL " + "; ".join(failed)

    names = sorted(set(found["accelerate"]) | set(found["ours"]), key=lambda n: (n.split(":")[0], n))
    for name in names:
        print(
            f"  {name:<78} accelerate {shown(found['accelerate'].get(name)):<10} ours {shown(found['ours'].get(name))}"
        )
    for library, report in found.items():
        subtests = [n for n in report if "::" in n]
        passed = sum(shown(report[n]) == "PASS" for n in subtests)
        print(f"  {library}: {passed} of {len(subtests)} sub-tests hold on 2 GPUs")


def main() -> None:
    parser = argparse.ArgumentParser(description="GPU check of DDP / FSDP / DeepSpeed / fp8")
    parser.add_argument("--quick", action="store_true", help="10 steps instead of 30")
    parser.add_argument(
        "--dry-run-cpu",
        action="store_true",
        help="tiny model on CPU: checks this script's plumbing, no figures",
    )
    args = parser.parse_args()
    steps = 10 if args.quick or args.dry_run_cpu else 30
    sizes = DRY_RUN_SIZES if args.dry_run_cpu else GPU_SIZES
    hw = detect()  # fork-safe: does not initialise CUDA in this process
    if not hw.has_cuda and not args.dry_run_cpu:
        raise SystemExit(
            "No CUDA GPU here: this check needs one (the CPU paths are covered by the test suite)."
        )
    print(
        f"torch {torch.__version__}; {hw.cuda_device_count} GPU(s); fp8 supported: {hw.fp8_supported}; {sizes}"
    )
    from notebook_launcher.runtime.precision.fp8 import fp8_linear_names

    print("fp8 would convert:", fp8_linear_names(build_model(**{**sizes, "layers": 1})))
    if not args.dry_run_cpu:
        from gpu_paths import run_all as check_gpu_paths  # benchmarks/gpu_paths.py, beside this file

        print(
            "GPU paths (results on CPU, spawn payloads, driver hazard, gpu_ids, MULTI_CPU, FSDP, DeepSpeed fp16):"
        )
        check_gpu_paths()
        if hw.cuda_device_count >= 2:
            print("Accelerate 1.16's own test scripts, 2 GPUs over NCCL (tests/accelerate_scripts.py):")
            check_accelerate_scripts()
        else:
            print("Accelerate's own test scripts: skipped, they need 2 GPUs (NCCL refuses two ranks on one)")
    for name, options in SECTIONS:
        for processes in (1, 2):
            try:
                run_section(name, options, processes, steps, sizes, args.dry_run_cpu)
            except Exception:  # a bug in this script must not hide the other figures
                traceback.print_exc()


if __name__ == "__main__":
    main()
