"""Steps/s of a hand-written DDP loop vs the same loop through Accelerator (2 CPU processes).

Both loops run in the same session, on the same data and model, with one intra-op thread per
process; printed as a ratio (goal: >= 0.97x raw on the ~10M-parameter MLP). Accelerate's figure is
printed too when it is installed.

    python benchmarks/step_overhead.py [--steps 60]
"""

from __future__ import annotations

import argparse
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from notebook_launcher import Accelerator, notebook_launch


def seed_model() -> nn.Module:
    return nn.Linear(10, 2)


def mlp_10m() -> nn.Module:
    return nn.Sequential(
        nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 1024)
    )


MODELS = {"seed (22 params)": (seed_model, 10, 2, 32), "MLP (~10.5M params)": (mlp_10m, 1024, 1024, 64)}


def _data(inputs: int, outputs: int, n: int) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, inputs, generator=g), torch.randn(n, outputs, generator=g))


def _time_loop(model, opt, loader, backward, steps: int) -> float:
    it = iter(loader)
    done, start = -5, 0.0  # 5 warm-up steps
    while done < steps:
        try:
            x, y = next(it)
        except StopIteration:
            it = iter(loader)
            continue
        if done == 0:
            start = time.perf_counter()
        opt.zero_grad()
        backward(nn.functional.mse_loss(model(x), y))
        opt.step()
        done += 1
    return steps / (time.perf_counter() - start)


def raw_worker(rank: int, world: int, port: int, name: str, steps: int, out) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    make, i, o, bs = MODELS[name]
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(make())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = _data(i, o, bs * world * 40)
    loader = DataLoader(data, batch_size=bs, sampler=DistributedSampler(data, world, rank, shuffle=True))
    rate = _time_loop(model, opt, loader, lambda loss: loss.backward(), steps)
    if rank == 0:
        out.put(rate)
    dist.barrier()
    # Leave without tearing down: destroying the gloo group while DDP's Reducer still holds it can
    # deadlock (~ProcessGroupGloo joins its worker thread, which waits for the GIL the dying Reducer
    # holds; seen here once in a few runs). notebook_launch's workers leave the same way.
    os._exit(0)


def _prepared_rate(acc, name: str, steps: int) -> float:
    """The model, optimizer and loader of MODELS[name] through `acc.prepare`, timed (ours or HF's)."""
    make, i, o, bs = MODELS[name]
    torch.manual_seed(0)
    model = make()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(_data(i, o, bs * acc.num_processes * 40), batch_size=bs, shuffle=True)
    model, opt, loader = acc.prepare(model, opt, loader)
    return _time_loop(model, opt, loader, acc.backward, steps)


def ours(name: str, steps: int) -> float:
    acc = Accelerator()
    rate = _prepared_rate(acc, name, steps)
    acc.end_training()
    return rate


def accelerate_rate(name: str, steps: int) -> float | None:
    try:
        import accelerate  # noqa: F401
    except ImportError:
        return None
    from accelerate import notebook_launcher as hf_launch

    ctx = mp.get_context("fork")
    q = ctx.SimpleQueue()

    def job():
        from accelerate import Accelerator as HFAccelerator

        torch.set_num_threads(1)
        acc = HFAccelerator(cpu=True)
        rate = _prepared_rate(acc, name, steps)
        if acc.is_main_process:
            q.put(rate)

    hf_launch(job, num_processes=2)
    return q.get()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument(
        "--repeats", type=int, default=3, help="best of N alternating runs (shared CPUs are noisy)"
    )
    args = parser.parse_args()
    print(f"{'model':22} {'raw DDP steps/s':>16} {'Accelerator':>12} {'ratio':>7} {'Accelerate':>11}")
    for name in MODELS:
        raws, mines, hfs = [], [], []
        for _ in range(args.repeats):  # alternate the two so load changes hit both alike
            raws.append(raw_rate(name, args.steps))
            mines.append(notebook_launch(ours, args=(name, args.steps), num_processes=2, quiet=True)[0])
            hfs.append(accelerate_rate(name, args.steps))
        raw, mine = max(raws), max(mines)
        hf = None if hfs[0] is None else max(hfs)
        hf_text = f"{hf:11.1f}" if hf is not None else "  not installed"
        print(f"{name:22} {raw:16.1f} {mine:12.1f} {mine / raw:6.3f}x {hf_text}")


def raw_rate(name: str, steps: int) -> float:
    ctx = mp.get_context("fork")
    out = ctx.SimpleQueue()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(raw_worker, args=(2, port, name, steps, out), nprocs=2, start_method="fork")
    return out.get()


if __name__ == "__main__":
    main()
