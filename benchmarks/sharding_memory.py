"""Per-rank memory and speed of DDP vs FSDP FULL_SHARD vs DeepSpeed ZeRO-3, side by side.

    python benchmarks/sharding_memory.py               # ~50M-parameter transformer, 2 CPU processes
    python benchmarks/sharding_memory.py --width 512   # smaller and quicker

Each strategy trains the same model (TransformerEncoderLayer blocks, AdamW, fp32) for a few steps
on 2 processes launched with notebook_launch. Every rank then counts the bytes of the tensors it
holds for the model and the optimizer:

- params: the rank's parameters (a DDP replica, an FSDP DTensor shard, a ZeRO-3 partition);
- master: fp32 master copies held apart from them (DeepSpeed's, in mixed precision; in fp32
  training ZeRO-3's master partition is the parameter partition itself, so it counts once);
- optimizer: the optimizer's state (AdamW's two moments), local part only.

and reports its peak RSS (whole process) and steps/s after one warm-up step. Ratios are against
DDP in the same run. Gradients are not counted (all three free or shard them differently within
a step). This is a measurement, never an assertion.
"""

from __future__ import annotations

import argparse
import resource
import time

import torch
from torch import nn

from notebook_launcher import notebook_launch

STRATEGIES = {
    "DDP": {},
    "FSDP FULL_SHARD": {
        "distributed_type": "FSDP",
        "fsdp_config": {"fsdp_transformer_layer_cls_to_wrap": "TransformerEncoderLayer"},
    },
    "ZeRO-3": {"distributed_type": "DEEPSPEED", "deepspeed_config": {"zero_stage": 3}},
}


def build_model(width: int, layers: int) -> nn.Module:
    torch.manual_seed(0)
    blocks = [
        nn.TransformerEncoderLayer(width, 8, 4 * width, dropout=0.0, batch_first=True) for _ in range(layers)
    ]
    return nn.Sequential(*blocks, nn.Linear(width, 1))


def _storages(tensors) -> dict[int, int]:
    """{storage address: bytes} of the local tensors behind `tensors`. Counting storages, not
    tensors, counts memory once where two names share it (ZeRO-3's fp32 "master" partition *is* the
    parameter partition in fp32 training; each parameter is a view into one flat buffer)."""
    found = {}
    for t in tensors:
        if hasattr(t, "ds_tensor"):
            t = t.ds_tensor
        if hasattr(t, "to_local"):
            t = t.to_local()
        storage = t.untyped_storage()
        if storage.nbytes():
            found[storage.data_ptr()] = storage.nbytes()
    return found


def _state_tensors(state: dict) -> list[torch.Tensor]:
    return [v for per_param in state.values() for v in per_param.values() if isinstance(v, torch.Tensor)]


def measure(width: int, layers: int, steps: int, batch: int, seq: int) -> dict:
    from notebook_launcher import Accelerator

    accelerator = Accelerator()
    model = build_model(width, layers)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model, optimizer = accelerator.prepare(model, optimizer)
    g = torch.Generator().manual_seed(accelerator.process_index)
    x = torch.randn(batch, seq, width, generator=g)
    times = []
    for _ in range(steps + 1):
        start = time.perf_counter()
        loss = model(x).pow(2).mean()
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        times.append(time.perf_counter() - start)
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
    total_params = sum(p.ds_numel if hasattr(p, "ds_numel") else p.numel() for p in model.parameters())
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    accelerator.end_training()
    return {
        "params": sum(params.values()),
        "master": sum(masters.values()),
        "optimizer": sum(optim.values()),
        "peak_rss_mib": peak_mib,
        "steps_per_s": steps / sum(times[1:]),
        "num_params": total_params,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args()
    kwargs = dict(width=args.width, layers=args.layers, steps=args.steps, batch=args.batch, seq=args.seq)
    rows = {}
    for name, options in STRATEGIES.items():
        try:
            result = notebook_launch(
                measure, kwargs=kwargs, num_processes=args.processes, timeout=1800, **options
            )
        except Exception as error:  # e.g. DeepSpeed not installed: report, keep the other rows
            print(f"{name}: not measured ({type(error).__name__}: {str(error).splitlines()[0]})")
            continue
        rows[name] = [result[rank] for rank in range(args.processes)]
    report(rows, args)


def report(rows: dict, args: argparse.Namespace) -> None:
    if "DDP" not in rows:
        print("DDP did not run; no baseline to compare with.")
        return
    n = rows["DDP"][0]["num_params"]
    print(
        f"\n{n / 1e6:.1f}M parameters, {args.processes} processes, fp32 AdamW, batch {args.batch}x{args.seq}"
    )
    header = f"{'strategy':<16} {'params MiB':>10} {'master MiB':>10} {'optim MiB':>10} {'total MiB':>10} {'x DDP':>6} {'peak RSS MiB':>13} {'x DDP':>6} {'steps/s':>8} {'x DDP':>6}"
    print(header)
    print("-" * len(header))
    mib = 2**20

    def worst(name: str, key: str) -> float:
        return max(r[key] for r in rows[name])

    def total(name: str) -> float:
        return max(r["params"] + r["master"] + r["optimizer"] for r in rows[name])

    base_total, base_rss = total("DDP"), worst("DDP", "peak_rss_mib")
    base_speed = min(r["steps_per_s"] for r in rows["DDP"])
    for name in rows:
        speed = min(r["steps_per_s"] for r in rows[name])
        print(
            f"{name:<16} {worst(name, 'params') / mib:>10.1f} {worst(name, 'master') / mib:>10.1f} "
            f"{worst(name, 'optimizer') / mib:>10.1f} {total(name) / mib:>10.1f} {total(name) / base_total:>6.2f} "
            f"{worst(name, 'peak_rss_mib'):>13.0f} {worst(name, 'peak_rss_mib') / base_rss:>6.2f} "
            f"{speed:>8.2f} {speed / base_speed:>6.2f}"
        )
    print("(per rank, the larger of the ranks; goal: FULL_SHARD and ZeRO-3 total <= 0.55 x DDP)")


if __name__ == "__main__":
    main()
