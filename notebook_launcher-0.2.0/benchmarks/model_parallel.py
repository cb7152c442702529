"""Per-rank parameter + optimizer-state bytes and step time on a transformer block: DDP, FSDP2,
TP = 2 and FSDP2 x TP, all on CPU processes (gloo), ratios against DDP in one run.

    python benchmarks/model_parallel.py            # ~1 minute on 4 cores
    python benchmarks/model_parallel.py --width 512 --steps 10

Bytes are what each rank really holds after a few AdamW steps: its local pieces of the parameters
(DTensor.to_local()) and of the optimizer state, the largest over the ranks. "Planned" is the part
held for the layers the tensor-parallel plan splits (q/k/v/o, up/down); the goal of issue 27 is a
TP = 2 rank holding <= 0.52x of DDP's bytes for them. Step time is the median over the timed steps
(forward, backward, optimizer step) — on CPU processes sharing cores it says which schedule costs
communication, not what a GPU would do.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from notebook_launcher import notebook_launch

PLAN = {
    "attn.q_proj": "colwise",
    "attn.k_proj": "colwise",
    "attn.v_proj": "colwise",
    "attn.o_proj": "rowwise",
    "mlp.up_proj": "colwise",
    "mlp.down_proj": "rowwise",
}


class Attention(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.head_dim = width // heads
        self.q_proj, self.k_proj = nn.Linear(width, width), nn.Linear(width, width)
        self.v_proj, self.o_proj = nn.Linear(width, width), nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = (
            p(x).view(b, s, -1, self.head_dim).transpose(1, 2)
            for p in (self.q_proj, self.k_proj, self.v_proj)
        )
        out = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, -1))  # -1: this rank's heads only under TP


class Mlp(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.up_proj, self.down_proj = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(nn.functional.gelu(self.up_proj(x)))


class TransformerBlock(nn.Module):
    def __init__(self, width: int, heads: int = 8) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn, self.mlp = Attention(width, heads), Mlp(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


def _local_bytes(t: torch.Tensor) -> int:
    t = t.to_local() if hasattr(t, "to_local") else t
    return t.numel() * t.element_size()


def measure(sizes: dict, width: int, steps: int) -> dict:
    """One mesh: bytes this rank holds (all, planned layers) and the median step time."""
    from notebook_launcher import Accelerator, ParallelismConfig
    from notebook_launcher.utils import TorchTensorParallelConfig

    handler = TorchTensorParallelConfig(plan=PLAN) if sizes.get("tp_size", 1) > 1 else None
    accelerator = Accelerator(parallelism_config=ParallelismConfig(**sizes, tp_handler=handler))
    torch.manual_seed(0)
    model = TransformerBlock(width)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model, optimizer = accelerator.prepare(model, optimizer)
    x = torch.randn(4, 64, width, generator=torch.Generator().manual_seed(accelerator.process_index))
    times = []
    for i in range(steps + 2):
        start = time.perf_counter()
        loss = model(x).pow(2).mean()
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        if i >= 2:
            times.append(time.perf_counter() - start)
    inner = accelerator.unwrap_model(model)
    planned_ids = {id(p) for name, m in inner.named_modules() if name in PLAN for p in m.parameters()}
    total = planned = 0
    for p in inner.parameters():
        held = _local_bytes(p) + sum(
            _local_bytes(v)
            for v in optimizer.optimizer.state.get(p, {}).values()
            if torch.is_tensor(v) and v.dim()
        )
        total += held
        planned += held if id(p) in planned_ids else 0
    return {"bytes": total, "planned": planned, "step_s": statistics.median(times)}


def run_all(meshes: list, width: int, steps: int) -> list:
    return [measure(sizes, width, steps) for _name, sizes in meshes]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    two = [("DDP", {"dp_replicate_size": 2}), ("FSDP2", {"dp_shard_size": 2}), ("TP=2", {"tp_size": 2})]
    four = [("FSDP2=2 x TP=2", {"dp_shard_size": 2, "tp_size": 2})]
    rows = []
    for meshes, n in ((two, 2), (four, 4)):
        result = notebook_launch(run_all, args=(meshes, args.width, args.steps), num_processes=n, quiet=True)
        for i, (name, _sizes) in enumerate(meshes):
            per_rank = [result[r][i] for r in range(n)]
            worst = max(per_rank, key=lambda m: m["bytes"])
            step = max(m["step_s"] for m in per_rank)
            rows.append((name, n, worst["bytes"], worst["planned"], step))
    ddp = rows[0]
    print(
        f"transformer block, width {args.width}, AdamW, fp32; bytes = parameters + optimizer state per rank"
    )
    print(
        f"{'mesh':<16} {'procs':>5} {'bytes/rank':>12} {'x DDP':>6} {'planned':>12} {'x DDP':>6} {'step ms':>8}"
    )
    for name, n, total, planned, step in rows:
        print(
            f"{name:<16} {n:>5} {total:>12,} {total / ddp[2]:>6.3f} {planned:>12,} "
            f"{planned / ddp[3]:>6.3f} {step * 1e3:>8.1f}"
        )


if __name__ == "__main__":
    main()
