"""`notebook-launcher test`: how many processes it runs, the short training each runs, and what
it may then claim.

The training checks what distributed training relies on, through the same `Accelerator` user
scripts use: the world has the expected size, a sum over ranks is right, a few optimizer steps on
sharded data reduce the loss, and afterwards every rank holds identical weights. Any failed check
raises, which the launcher reports with the failing rank and its traceback. One process checks
none of the distributed part, so without GPUs the test runs 2 (as notebook_launch does), and a
run of one process says plainly that distributed training was not tested.
"""

from __future__ import annotations

import os
from typing import Any

CPU_PROCESSES = 2


def choose_processes(args: Any) -> None:
    """On a machine without GPUs (or with --cpu), run 2 processes per machine unless the flags or
    the config file say how many (the launch default there would be 1)."""
    if args.num_processes is not None:
        return
    from .resolve import read_config_file

    config, _ = read_config_file(args.config_file)
    if config.num_processes is not None:
        return
    if not (args.cpu or config.use_cpu):
        from ..system.hardware import detect

        if detect().cuda_device_count:
            return  # one process per GPU, as `launch` does
    args.num_processes = CPU_PROCESSES * (args.num_machines or config.num_machines)


def verdict(status: int, config: Any) -> tuple[str, bool]:
    """(what the test may claim, whether it failed) after the run of `config`."""
    if status != 0:
        return "distributed training does NOT work here (see the failure above).", True
    world = int(config.num_processes)
    if world < 2:
        return (
            "training works on 1 process here, but distributed training was NOT tested: that needs 2 or more "
            "processes (`notebook-launcher test --num_processes 2`; add --cpu on a machine with a single GPU).",
            False,
        )
    return f"distributed training works here ({world} processes, {config.distributed_type}).", False


def _data(samples: int = 256) -> tuple:
    import torch

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(samples, 8, generator=generator)
    true_w = torch.arange(1.0, 9.0).unsqueeze(1) / 8
    y = x @ true_w + 0.01 * torch.randn(samples, 1, generator=generator)
    return x, y


def main() -> None:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from notebook_launcher import Accelerator

    accelerator = Accelerator()
    expected_world = int(os.environ.get("WORLD_SIZE", "1"))
    if accelerator.num_processes != expected_world:
        raise RuntimeError(
            f"Accelerator sees {accelerator.num_processes} processes, WORLD_SIZE is {expected_world}"
        )

    rank_value = torch.tensor([float(accelerator.process_index + 1)], device=accelerator.device)
    total = accelerator.reduce(rank_value, reduction="sum").item()
    expected_total = expected_world * (expected_world + 1) / 2
    if abs(total - expected_total) > 1e-6:
        raise RuntimeError(f"sum over ranks is {total}, expected {expected_total}")

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = _data()
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    losses = []
    for _epoch in range(3):
        for inputs, targets in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(inputs), targets)
            accelerator.backward(loss)
            optimizer.step()
            losses.append(loss.item())
    if not losses[-1] < losses[0]:
        raise RuntimeError(f"the loss did not go down: first {losses[0]:.4f}, last {losses[-1]:.4f}")

    weights = torch.cat([p.detach().flatten() for p in accelerator.unwrap_model(model).parameters()])
    every_rank = accelerator.gather(weights.unsqueeze(0))
    if not torch.allclose(every_rank, every_rank[0].expand_as(every_rank)):
        raise RuntimeError("the ranks ended with different weights: gradients were not synchronised")

    accelerator.wait_for_everyone()
    accelerator.print(
        f"notebook-launcher test: {accelerator.num_processes} process(es), {accelerator.distributed_type}, "
        f"device {accelerator.device}, mixed precision {accelerator.mixed_precision}: "
        f"loss {losses[0]:.4f} -> {losses[-1]:.4f}, weights identical on every rank."
    )
    accelerator.end_training()


if __name__ == "__main__":
    main()
