"""One-shot GPU check of sharded initialisation and live memory (needs a CUDA GPU; not a test).

    python benchmarks/gpu_memory_check.py               # ~1 minute on one GPU
    python benchmarks/gpu_memory_check.py --dry-run-cpu  # the script's plumbing, on CPU

On GPU 0, one process each (NCCL refuses two ranks on one GPU):

1. FSDP bf16, model built with `init_empty_weights()` everywhere: `to_empty` on the GPU and each
   module's `reset_parameters()` on the DTensor shards (torch's CUDA RNG for DTensors), then a few
   steps: the loss must fall.
2. FSDP bf16 and plain (DDP-less, one process) fp32: torch's peak allocated bytes beside
   `estimate_memory`'s parameters + gradients + optimizer state, and the GPU figures the worker's
   memory sampler sent (`result.memory`): allocated, peak, device total.

Prints one line per section, or its error. Paste the output into the issue note.
"""

from __future__ import annotations

import argparse
import os
import time
import traceback

import torch
from torch import nn

from notebook_launcher import estimate_memory, notebook_launch

WIDTH, LAYERS = 1024, 8


def build_model(width: int = WIDTH, layers: int = LAYERS) -> nn.Module:
    blocks = [
        nn.TransformerEncoderLayer(width, 16, 4 * width, dropout=0.0, batch_first=True) for _ in range(layers)
    ]
    return nn.Sequential(*blocks, nn.Linear(width, width))


def train(width: int, layers: int, meta: bool, steps: int = 8) -> dict:
    from notebook_launcher import Accelerator, init_empty_weights

    accelerator = Accelerator()
    torch.manual_seed(0)
    if meta:
        with init_empty_weights():
            model = build_model(width, layers)
    else:
        model = build_model(width, layers)
    model = accelerator.prepare(model)
    optimizer = accelerator.prepare(torch.optim.AdamW(model.parameters(), lr=1e-4))
    x = torch.randn(8, 128, width, device=accelerator.device)
    target = torch.randn(8, 128, width, device=accelerator.device)
    losses = []
    for _ in range(steps):
        loss = nn.functional.mse_loss(model(x), target)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    time.sleep(1.5)  # let the sampler send a sample with the GPU figures
    cuda = accelerator.device.type == "cuda"
    peak = torch.cuda.max_memory_allocated(accelerator.device) if cuda else 0
    accelerator.end_training()
    return {"losses": losses, "peak": peak, "device": str(accelerator.device)}


SECTIONS = [
    ("FSDP bf16, init_empty_weights", dict(meta=True), "FSDP FULL_SHARD",
     {"distributed_type": "FSDP", "mixed_precision": "bf16"}),
    ("FSDP bf16, ordinary init", dict(meta=False), "FSDP FULL_SHARD",
     {"distributed_type": "FSDP", "mixed_precision": "bf16"}),
    ("one process fp32", dict(meta=False), "DDP", {}),
]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dry-run-cpu", action="store_true", help="tiny model on CPU: plumbing only")
    args = parser.parse_args()
    width, layers = (64, 2) if args.dry_run_cpu else (WIDTH, LAYERS)
    if not args.dry_run_cpu and not torch.cuda.is_available():
        raise SystemExit("No CUDA GPU here: this check needs one (--dry-run-cpu checks the plumbing).")
    os.environ.setdefault("NOTEBOOK_LAUNCHER_MEMORY_INTERVAL", "0.5")
    extra = {"use_cpu": True} if args.dry_run_cpu else {}
    for name, kwargs, strategy, options in SECTIONS:
        try:
            result = notebook_launch(
                train, kwargs=dict(kwargs, width=width, layers=layers), num_processes=1, timeout=600,
                quiet=True, **options, **extra,
            )  # fmt: skip
            r, samples = result[0], result.memory.get(0, [])
            estimate = estimate_memory(lambda: build_model(width, layers), 1, strategies=[strategy]).rows[0]
            gpu = [s for s in samples if "gpu_allocated" in s]
            seen = (
                f"sampler: {len(gpu)} GPU samples, last allocated {gpu[-1]['gpu_allocated'] / 2**30:.2f} GiB, "
                f"peak {gpu[-1]['gpu_peak'] / 2**30:.2f} GiB of {gpu[-1]['gpu_total'] / 2**30:.0f} GiB"
                if gpu
                else f"sampler: {len(samples)} samples, none with GPU figures"
            )
            print(
                f"{name:<32} {r['device']:<7} loss {r['losses'][0]:.4f} -> {r['losses'][-1]:.4f}; torch peak "
                f"{r['peak'] / 2**30:.2f} GiB, estimate (params+grads+optimizer) {estimate.total / 2**30:.2f} GiB; "
                f"{seen}; peak RSS {result.memory.peak_rss(0) / 2**30:.2f} GiB"
            )
        except Exception:
            print(f"{name:<32} FAILED")
            traceback.print_exc()


if __name__ == "__main__":
    main()
