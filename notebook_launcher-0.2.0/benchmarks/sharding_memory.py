"""Per-rank memory and speed of DDP vs FSDP FULL_SHARD vs DeepSpeed ZeRO-3, with and without
sharded initialisation, beside `estimate_memory`'s figures.

    python benchmarks/sharding_memory.py               # ~50M-parameter transformer, 2 CPU processes
    python benchmarks/sharding_memory.py --width 512   # smaller and quicker
    python benchmarks/sharding_memory.py --layers 3 --start_method spawn   # libraries imported in the window

Each row trains the same model (TransformerEncoderLayer blocks, AdamW, fp32) for a few steps on
2 processes launched with notebook_launch; "+ sharded init" builds it inside
`accelerator.sharded_init()` (rank 0 builds it, the other ranks on the meta device). Every rank
reports:

- held bytes: its parameters (a DDP replica, an FSDP DTensor shard, a ZeRO-3 partition), its
  gradients (`.grad` after backward; ZeRO-3's gradient partition buffer), and its optimizer state
  plus any separate fp32 master copy. Storages are counted once (ZeRO-3's fp32 master partition
  *is* the parameter partition in fp32 training). `estimate_memory` predicts the same three, and
  the "meas/est" column is measured / estimated;
- peak RSS growth: VmHWM minus VmRSS at the start of the function (the peak is reset there via
  /proc/self/clear_refs). A forked worker starts with the pages it shares with the launching
  process already resident (torch's libraries and heap, ~220 MiB here; ~280 MiB once the parent
  imported deepspeed), which no strategy allocates; the growth is what the training added. The
  raw VmHWM is shown too;
- steps/s after one warm-up step; on a GPU, torch's peak allocated bytes.

Ratios are against DDP in the same run. This is a measurement, never an assertion.
"""

from __future__ import annotations

import argparse
import contextlib
import time

import torch
from torch import nn

from notebook_launcher import notebook_launch
from notebook_launcher.estimate.memory_estimate import estimate_memory
from notebook_launcher.system.host_memory import process_memory, reset_peak

FSDP = {
    "distributed_type": "FSDP",
    "fsdp_config": {"fsdp_transformer_layer_cls_to_wrap": "TransformerEncoderLayer"},
}
ZERO3 = {"distributed_type": "DEEPSPEED", "deepspeed_config": {"zero_stage": 3}}
ROWS = {  # name: (launch options, sharded init, estimate_memory's strategy)
    "DDP": ({}, False, "DDP"),
    "FSDP FULL_SHARD": (FSDP, False, "FSDP FULL_SHARD"),
    "  + sharded init": (FSDP, True, "FSDP FULL_SHARD"),
    "ZeRO-3": (ZERO3, False, "ZeRO-3"),
    "  + sharded init ": (ZERO3, True, "ZeRO-3"),
}
MIB = 2**20


def build_model(width: int, layers: int) -> nn.Module:
    torch.manual_seed(0)
    blocks = [
        nn.TransformerEncoderLayer(width, 8, 4 * width, dropout=0.0, batch_first=True) for _ in range(layers)
    ]
    return nn.Sequential(*blocks, nn.Linear(width, 1))


def _storages(tensors) -> dict[int, int]:
    """{storage address: bytes} of the local tensors behind `tensors` (each storage once)."""
    found = {}
    for t in tensors:
        if t is None:
            continue
        # a ZeRO-3 parameter: its partition, plus its full data where ZeRO-3 keeps it (persistent)
        for part in (t.ds_tensor, t.data) if hasattr(t, "ds_tensor") else (t,):
            part = part.to_local() if hasattr(part, "to_local") else part
            storage = part.untyped_storage()
            if storage.nbytes():
                found[storage.data_ptr()] = storage.nbytes()
    return found


def _state_tensors(state: dict) -> list[torch.Tensor]:
    return [v for per_param in state.values() for v in per_param.values() if isinstance(v, torch.Tensor)]


def _gradients(model: nn.Module) -> dict[int, int]:
    zero = getattr(getattr(model, "optimizer", None), "grad_partitions_flat_buffer", None)
    if zero is not None:  # DeepSpeed ZeRO-3: one flat buffer of this rank's gradient partitions
        return _storages([zero])
    return _storages(p.grad for p in model.parameters())


def held_bytes(accelerator, model, optimizer, grads: dict[int, int]) -> dict[str, int]:
    """Bytes of parameters, gradients and optimizer state (+ separate master copies) this rank holds."""
    inner = optimizer.optimizer
    engine_optimizer = getattr(inner, "engine", None)
    if engine_optimizer is not None:  # DeepSpeed: the ZeRO optimizer holds masters + the torch state
        zero = engine_optimizer.optimizer
        params = _storages(accelerator.unwrap_model(model).parameters())
        masters = _storages(
            [
                *getattr(zero, "fp32_partitioned_groups_flat", []),
                *getattr(zero, "single_partition_of_fp32_groups", []),
            ]
        )
        optim = _storages(_state_tensors(zero.optimizer.state))
    else:
        params = _storages(model.parameters())
        masters = {}
        optim = _storages(_state_tensors(inner.state))
    masters = {ptr: n for ptr, n in masters.items() if ptr not in params}  # a separate copy only
    return {
        "params": sum(params.values()),
        "grads": sum(grads.values()),
        "optimizer": sum(optim.values()) + sum(masters.values()),
    }


def measure(
    width: int, layers: int, steps: int, batch: int, seq: int, sharded_init: bool = False
) -> dict[str, float]:
    """Train a few steps; what this rank held, its peak RSS growth and its speed."""
    from notebook_launcher import Accelerator

    reset_peak()
    start = process_memory().rss
    accelerator = Accelerator()
    with accelerator.sharded_init() if sharded_init else contextlib.nullcontext():
        model = build_model(width, layers)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model, optimizer = accelerator.prepare(model, optimizer)
    prepare_peak = process_memory().peak_rss - start
    g = torch.Generator().manual_seed(accelerator.process_index)
    x = torch.randn(batch, seq, width, generator=g).to(accelerator.device)
    times, grads = [], {}
    for step in range(steps + 1):
        begin = time.perf_counter()
        loss = model(x).pow(2).mean()
        accelerator.backward(loss)
        if step == 0:  # the warm-up step is not timed: look at the gradients there
            grads = _gradients(model)
        optimizer.step()
        optimizer.zero_grad()
        times.append(time.perf_counter() - begin)
    held = held_bytes(accelerator, model, optimizer, grads)
    peak = process_memory().peak_rss
    gpu = torch.cuda.max_memory_allocated(accelerator.device) if accelerator.device.type == "cuda" else 0
    accelerator.end_training()
    return {
        **held,
        "rss_growth": peak - start,
        "prepare_peak": prepare_peak,
        "peak_rss": peak,
        "gpu_peak": gpu,
        "steps_per_s": steps / sum(times[1:]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument(
        "--start_method",
        default="auto",
        help="spawn: workers import torch and DeepSpeed themselves, inside the measured window",
    )
    args = parser.parse_args()
    kwargs = dict(width=args.width, layers=args.layers, steps=args.steps, batch=args.batch, seq=args.seq)
    estimate = estimate_memory(lambda: build_model(args.width, args.layers), args.processes)
    rows = {}
    for name, (options, sharded, _) in ROWS.items():
        try:
            result = notebook_launch(
                measure,
                kwargs=dict(kwargs, sharded_init=sharded),
                num_processes=args.processes,
                timeout=1800,
                quiet=True,
                start_method=args.start_method,
                **options,
            )
        except Exception as error:  # e.g. DeepSpeed not installed: report, keep the other rows
            print(f"{name}: not measured ({type(error).__name__}: {str(error).splitlines()[0]})")
            continue
        rows[name] = [result[rank] for rank in range(args.processes)]
    report(rows, estimate, args)


def report(rows: dict, estimate, args: argparse.Namespace) -> None:
    if "DDP" not in rows:
        print("DDP did not run; no baseline to compare with.")
        return
    gpu = any(r["gpu_peak"] for per_rank in rows.values() for r in per_rank)
    print(
        f"\n{estimate.num_parameters / 1e6:.1f}M parameters, {args.processes} processes, fp32 AdamW, "
        f"batch {args.batch}x{args.seq}; MiB per rank (the larger of the ranks)"
    )
    header = (
        f"{'':<18}{'params':>8}{'grads':>8}{'optim':>8}{'total':>8}{'est.':>8}{'meas/est':>9}"
        f"{'peak RSS growth':>16}{'x DDP':>6}{'raw peak':>9}{'steps/s':>8}{'x DDP':>6}"
        + (f"{'GPU peak':>9}{'x DDP':>6}" if gpu else "")
    )
    print(header)
    print("-" * len(header))

    def worst(name: str, key: str) -> float:
        return max(r[key] for r in rows[name])

    def total(name: str) -> float:
        return max(r["params"] + r["grads"] + r["optimizer"] for r in rows[name])

    base_growth, base_gpu = worst("DDP", "rss_growth"), worst("DDP", "gpu_peak")
    base_speed = min(r["steps_per_s"] for r in rows["DDP"])
    for name, per_rank in rows.items():
        est = estimate.find(ROWS[name][2], processes=args.processes).total
        speed = min(r["steps_per_s"] for r in per_rank)
        line = (
            f"{name:<18}{worst(name, 'params') / MIB:>8.1f}{worst(name, 'grads') / MIB:>8.1f}"
            f"{worst(name, 'optimizer') / MIB:>8.1f}{total(name) / MIB:>8.1f}{est / MIB:>8.1f}"
            f"{total(name) / est:>9.3f}{worst(name, 'rss_growth') / MIB:>16.0f}"
            f"{worst(name, 'rss_growth') / base_growth:>6.2f}{worst(name, 'peak_rss') / MIB:>9.0f}"
            f"{speed:>8.2f}{speed / base_speed:>6.2f}"
        )
        if gpu:
            line += f"{worst(name, 'gpu_peak') / MIB:>9.0f}{worst(name, 'gpu_peak') / max(base_gpu, 1):>6.2f}"
        print(line)
    print("(goal: FULL_SHARD and ZeRO-3 with sharded init, peak RSS growth <= 0.6 x DDP's; est. within 10%)")


if __name__ == "__main__":
    main()
