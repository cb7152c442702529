"""What a launched worker costs per training step: the same raw DDP code started plainly vs by us.

The same hand-written DDP loop (one intra-op thread per process, gloo, SGD, data already in
memory) runs in one session, started these ways, alternating so load changes hit all alike:

- plain fork: `torch.multiprocessing` forks the ranks, no launcher (the baseline);
- notebook_launch: the raw code as a launched function (fork);
- + Accelerator: the loop through `accelerator.prepare` / `accelerator.backward`;
- warm pool: the raw code launched with start_method="forkserver" (workers forked ahead);
- CLI: the raw code as a script under `notebook-launcher launch`, vs the same script under plain
  `torchrun` (the CLI's own baseline).

For four step sizes (the README's 22-parameter seed model, a 2M-parameter MLP, a 10M MLP, a
transformer block; batch 32) on 2 and 4
ranks. Printed: the baseline's steps/s and each path's ratio to it (median of --repeats runs),
and rank 0's CPU milliseconds per step, which load from other processes moves far less than
wall time. Goal (issue 25): every ratio within 2 % of 1.

    python benchmarks/step_overhead.py [--steps 150] [--repeats 3] [--ranks 2 4] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

WARMUP = 20


def mlp(width_in: int, hidden: int, width_out: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(width_in, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, width_out),
    )


MODELS = {  # name: (build, input shape of one batch)
    "seed model (22)": (lambda: nn.Linear(10, 2), (32, 10)),
    "MLP 2M": (lambda: mlp(512, 1024, 512), (32, 512)),
    "MLP 10M": (lambda: mlp(1024, 2048, 1024), (32, 1024)),
    "transformer block": (
        lambda: nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True),
        (32, 32, 256),
    ),
}


# ------------------------------------------------------------------ the timed loop (every path)
def timed_steps(model: nn.Module, opt: torch.optim.Optimizer, backward, shape, rank: int, steps: int):
    """(steps/s, CPU ms per step) of `steps` steps after WARMUP, on 16 batches made here."""
    g = torch.Generator().manual_seed(rank)
    batches = torch.randn(16, *shape, generator=g)
    for i in range(WARMUP + steps):
        if i == WARMUP:
            wall, cpu = time.perf_counter(), time.process_time()
        opt.zero_grad()
        backward(model(batches[i % 16]).square().mean())
        opt.step()
    return steps / (time.perf_counter() - wall), (time.process_time() - cpu) / steps * 1e3


def raw_ddp(name: str, steps: int):
    """The raw code, in a process whose gloo group is up (made here when nobody made it)."""
    torch.set_num_threads(1)
    if not dist.is_initialized():
        dist.init_process_group("gloo")
    build, shape = MODELS[name]
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(build())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    return timed_steps(model, opt, lambda loss: loss.backward(), shape, dist.get_rank(), steps)


def accelerator_loop(name: str, steps: int):
    from notebook_launcher import Accelerator

    torch.set_num_threads(1)
    acc = Accelerator()
    build, shape = MODELS[name]
    torch.manual_seed(0)
    model = build()
    model, opt = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.01))
    return timed_steps(model, opt, acc.backward, shape, acc.process_index, steps)


# ------------------------------------------------------------------ the ways to start it
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _plain_worker(rank: int, world: int, port: int, name: str, steps: int, out) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
    )  # fmt: skip
    figures = raw_ddp(name, steps)
    if rank == 0:
        out.put(figures)
    dist.barrier()
    os._exit(0)  # as notebook_launch's workers leave: no teardown of a group DDP still holds


def plain_fork(name: str, world: int, steps: int):
    ctx = mp.get_context("fork")
    out = ctx.SimpleQueue()
    mp.start_processes(
        _plain_worker, args=(world, _free_port(), name, steps, out), nprocs=world, start_method="fork"
    )
    return out.get()


def launched(name: str, world: int, steps: int, fn=raw_ddp, start_method: str = "fork"):
    from notebook_launcher import notebook_launch

    return notebook_launch(
        fn, args=(name, steps), num_processes=world, quiet=True, start_method=start_method
    )[0]


SCRIPT = f"""
import json, os, sys
sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
from step_overhead import raw_ddp
figures = raw_ddp(sys.argv[1], int(sys.argv[2]))
if int(os.environ["RANK"]) == 0:
    with open(sys.argv[3], "w") as fp:
        json.dump(figures, fp)
"""


def script_run(command, name: str, world: int, steps: int):
    """The raw code as a script under `command` (torchrun, or our CLI): rank 0's figures."""
    folder = Path(tempfile.mkdtemp(prefix="step_overhead_"))
    try:
        (folder / "train.py").write_text(SCRIPT)
        out = folder / "figures.json"
        subprocess.run(
            [*command(world, _free_port()), "train.py", name, str(steps), str(out)],
            cwd=folder, check=True, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        return tuple(json.loads(out.read_text()))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def torchrun_command(world: int, port: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={world}",
        f"--master_port={port}",
    ]


def cli_command(world: int, port: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "notebook_launcher",
        "launch",
        f"--num_processes={world}",
        f"--main_process_port={port}",
    ]


PATHS = {  # column: (baseline column, how to run)
    "plain fork": (None, lambda n, w, s: plain_fork(n, w, s)),
    "notebook_launch": ("plain fork", lambda n, w, s: launched(n, w, s)),
    "+ Accelerator": ("plain fork", lambda n, w, s: launched(n, w, s, accelerator_loop)),
    "warm pool": ("plain fork", lambda n, w, s: launched(n, w, s, start_method="forkserver")),
    "torchrun": (None, lambda n, w, s: script_run(torchrun_command, n, w, s)),
    "CLI": ("torchrun", lambda n, w, s: script_run(cli_command, n, w, s)),
}


def measure(name: str, world: int, steps: int, repeats: int, paths: list[str]) -> dict[str, list[tuple]]:
    """Each path `repeats` times, alternating: {path: [(steps/s, CPU ms/step), ...]}."""
    found: dict[str, list[tuple]] = {p: [] for p in paths}
    for _ in range(repeats):
        for path in paths:
            found[path].append(tuple(PATHS[path][1](name, world, steps)))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--paths", nargs="+", default=list(PATHS), choices=list(PATHS))
    parser.add_argument(
        "--quick", action="store_true", help="the seed model and the 2M MLP on 2 ranks, no CLI"
    )
    args = parser.parse_args()
    if args.quick:
        args.models, args.ranks = ["seed model (22)", "MLP 2M"], [2]
        args.paths = [p for p in args.paths if p not in ("torchrun", "CLI")]
    print(
        f"{os.cpu_count()} CPUs, {args.steps} steps after {WARMUP}, median of {args.repeats}; ratio = steps/s over the baseline's"
    )
    header = f"{'model':18} {'ranks':>5} {'baseline':>16} {'path':>16} {'steps/s':>8} {'ratio':>7} {'CPU ms/step':>12}"
    print(header + "\n" + "-" * len(header))
    for name in args.models:
        for world in args.ranks:
            found = measure(name, world, args.steps, args.repeats, args.paths)
            for path in args.paths:
                base = PATHS[path][0]
                rate = statistics.median(r for r, _ in found[path])
                cpu = statistics.median(c for _, c in found[path])
                if base is None or base not in found:
                    print(f"{name:18} {world:5d} {'-':>16} {path:>16} {rate:8.1f} {'':>7} {cpu:12.2f}")
                    continue
                ratio = rate / statistics.median(r for r, _ in found[base])
                print(f"{name:18} {world:5d} {base:>16} {path:>16} {rate:8.1f} {ratio:6.3f}x {cpu:12.2f}")


if __name__ == "__main__":
    main()
