"""Pipeline parallelism on CPU processes (gloo): per-rank parameter bytes, the measured bubble
fraction of each schedule against its ideal, and steps/s against DDP of the same model, same run.

    python benchmarks/pipeline.py                 # ~2 minutes on 2 cores
    python benchmarks/pipeline.py --blocks 8 --width 256 --steps 6

The model is a stack of residual MLP blocks (an nn.Sequential), cut into pp = 2 stages.

- Bytes: the parameters each rank holds after prepare, the largest over the ranks, against the whole
  model (what a DDP rank holds). Goal (issue 35): <= 1/pp of the whole + one block.
- Bubble: on each rank, the time the schedule waits for its point-to-point transfers in a step
  (torch's schedules wait in one function, timed here) over the step's time (model.step: forward +
  backward, not the optimizer); the median over the steps, averaged over the ranks. It counts the
  transfers themselves too (loopback: small). Ideal: (p - 1) / (m + p - 1) for gpipe and 1f1b, (p - 1) / (v m + p - 1)
  for interleaved 1F1B with v stages per rank. Goal: within 0.1 of the ideal on CPU.
- Steps/s: the same global batch through DDP over the same 2 ranks (each rank half the batch).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import OrderedDict

import torch
from torch import nn

from notebook_launcher import notebook_launch


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.tanh(self.up(x)))


def make_model(blocks: int, width: int) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(OrderedDict(layers=nn.Sequential(*(Block(width) for _ in range(blocks)))))


class WaitClock:
    """Seconds a rank spends waiting on the schedule's point-to-point transfers (torch's schedules all
    wait through schedules._wait_batch_p2p): the rank's idle time, bubble and transfers together."""

    def __init__(self) -> None:
        from torch.distributed.pipelining import schedules

        self.waited = 0.0
        original = schedules._wait_batch_p2p

        def timed(work: list) -> None:
            began = time.perf_counter()
            original(work)
            self.waited += time.perf_counter() - began

        schedules._wait_batch_p2p = timed


def measure_pipeline(schedule: str, micro: int, blocks: int, width: int, batch: int, steps: int) -> dict:
    from notebook_launcher import Accelerator, ParallelismConfig
    from notebook_launcher.utils import TorchPipelineParallelConfig

    pipeline = TorchPipelineParallelConfig(
        schedule=schedule, n_microbatches=micro, loss_fn=nn.functional.mse_loss
    )
    accelerator = Accelerator(parallelism_config=ParallelismConfig(pp_size=2, pp_handler=pipeline))
    model = make_model(blocks, width)
    whole = sum(p.numel() * p.element_size() for p in model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    model, opt = accelerator.prepare(model, opt)
    held = sum(p.numel() * p.element_size() for p in model.parameters())
    x, y = torch.randn(batch, width), torch.randn(batch, width)
    clock = WaitClock()
    times, bubbles = [], []
    for step in range(steps + 2):  # two warm-up steps
        accelerator.wait_for_everyone()
        clock.waited = 0.0
        began = time.perf_counter()
        model.step(x, target=y)  # forward + backward: the pipeline; the optimizer step is not timed
        took = time.perf_counter() - began
        opt.step()
        opt.zero_grad()
        if step >= 2:
            times.append(took)
            bubbles.append(clock.waited / took)
    block = sum(p.numel() * p.element_size() for p in Block(width).parameters())
    return {
        "held": held,
        "whole": whole,
        "block": block,
        "step": statistics.median(times),
        "bubble": statistics.median(bubbles),
    }


def measure_ddp(blocks: int, width: int, batch: int, steps: int) -> float:
    from notebook_launcher import Accelerator

    accelerator = Accelerator()
    model = make_model(blocks, width)
    model, opt = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=1e-3))
    half = batch // accelerator.num_processes
    x, y = torch.randn(half, width), torch.randn(half, width)
    times = []
    for step in range(steps + 2):
        accelerator.wait_for_everyone()
        began = time.perf_counter()
        accelerator.backward(nn.functional.mse_loss(model(x), y))
        took = time.perf_counter() - began
        opt.step()
        opt.zero_grad()
        if step >= 2:
            times.append(took)
    return statistics.median(times)


def ideal_bubble(schedule: str, p: int, m: int, v: int) -> float:
    return (p - 1) / (v * m + p - 1) if schedule == "interleaved_1f1b" else (p - 1) / (m + p - 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    common = (args.blocks, args.width, args.batch, args.steps)
    ddp = notebook_launch(measure_ddp, args=common, num_processes=2)
    ddp_step = max(ddp[0], ddp[1])
    print(f"model: {args.blocks} blocks of width {args.width}, global batch {args.batch}, 2 CPU processes")
    print(f"DDP: {ddp_step * 1e3:.1f} ms/step ({1 / ddp_step:.2f} steps/s)")
    for schedule in ("gpipe", "1f1b", "interleaved_1f1b"):
        for micro in (4, 8):
            result = notebook_launch(
                measure_pipeline,
                args=(schedule, micro, *common),
                num_processes=2,
            )
            held = max(r["held"] for r in result)
            whole, block = result[0]["whole"], result[0]["block"]
            step = max(r["step"] for r in result)
            bubble = statistics.mean(r["bubble"] for r in result)
            v = 2 if schedule == "interleaved_1f1b" else 1
            ideal = ideal_bubble(schedule, 2, micro, v)
            goal = "ok" if held <= whole / 2 + block else "OVER"
            near = "ok" if abs(bubble - ideal) <= 0.1 else "OFF"
            print(
                f"{schedule:>17} m={micro}: bytes/rank {held:,} = {held / whole:.3f}x whole (goal <= "
                f"{(whole / 2 + block) / whole:.3f}x: {goal}); bubble {bubble:.3f} vs ideal {ideal:.3f} "
                f"({near}); {step * 1e3:.1f} ms/step = {ddp_step / step:.2f}x DDP's steps/s"
            )


if __name__ == "__main__":
    main()
