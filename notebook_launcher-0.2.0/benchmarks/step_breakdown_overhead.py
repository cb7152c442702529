"""What the step clock (runtime/world/step_clock.py, behind result.performance) costs: the same
Accelerator loop on 2 CPU processes through notebook_launch with the clock on (the default) and off
(NOTEBOOK_LAUNCHER_REPORT_PERFORMANCE=0), interleaved, medians of steps/s, printed as a ratio.
Goal: the clock costs at most 2 % of a step, also on a tiny model where per-step costs show most.

    python benchmarks/step_breakdown_overhead.py [--steps 300] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from notebook_launcher import notebook_launch

MODELS = {"tiny (8->1 linear)": (8, 0), "MLP 3x1024": (1024, 3)}


def train(width: int, depth: int, steps: int) -> float:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from notebook_launcher import Accelerator

    torch.manual_seed(0)
    torch.set_num_threads(1)
    accelerator = Accelerator()
    layers = [torch.nn.Linear(width, width) for _ in range(depth)] + [torch.nn.Linear(width, 1)]
    model = torch.nn.Sequential(*layers)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    data = TensorDataset(torch.randn(32 * 2 * (steps + 20), width), torch.randn(32 * 2 * (steps + 20), 1))
    model, optimizer, loader = accelerator.prepare(model, optimizer, DataLoader(data, batch_size=32))
    started = None
    for index, (x, y) in enumerate(loader):
        if index == 20:
            started = time.perf_counter()  # after warm-up
        accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
        optimizer.step()
        optimizer.zero_grad()
    return steps / (time.perf_counter() - started)


def steps_per_second(width: int, depth: int, steps: int, clock: bool) -> float:
    saved = os.environ.get("NOTEBOOK_LAUNCHER_REPORT_PERFORMANCE")
    os.environ["NOTEBOOK_LAUNCHER_REPORT_PERFORMANCE"] = "" if clock else "0"
    try:
        result = notebook_launch(train, args=(width, depth, steps), num_processes=2, quiet=True)
    finally:
        if saved is None:
            os.environ.pop("NOTEBOOK_LAUNCHER_REPORT_PERFORMANCE", None)
        else:
            os.environ["NOTEBOOK_LAUNCHER_REPORT_PERFORMANCE"] = saved
    return min(result.values)  # the slower rank sets the pace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    print(f"{'model':<20} {'clock off':>10} {'clock on':>10} {'on/off':>7}")
    for name, (width, depth) in MODELS.items():
        off, on = [], []
        for _ in range(options.rounds):  # interleaved: drift on the machine hits both alike
            off.append(steps_per_second(width, depth, options.steps, clock=False))
            on.append(steps_per_second(width, depth, options.steps, clock=True))
        off_m, on_m = statistics.median(off), statistics.median(on)
        print(f"{name:<20} {off_m:>8.1f}/s {on_m:>8.1f}/s {on_m / off_m:>6.3f}x")


if __name__ == "__main__":
    main()
