"""Launch latency: from the call until every rank passed one barrier and the call returned.

2 CPU ranks, side by side in one run (rounds alternate the contenders; medians):

- the raw floor: torch.multiprocessing fork + init_process_group + barrier;
- notebook_launch with fork (the default): the first launch and relaunches;
- the warm pool (start_method="forkserver", what a kernel that holds CUDA gets): its first launch
  (the server starts, importing torch) and warm relaunches;
- spawn (cold every time), and Accelerate's notebook_launcher when it is installed;
- the first launch in a Jupyter kernel (a cell imports, the next launches), where the heavy
  warm-up import is done while the kernel is idle instead of before the first fork.

Each timed launch follows a pause (THINK seconds, as between two notebook cells), in which the warm
pool forks the next launch's workers; the same pause precedes every contender. Goals (issue 15):
fork relaunch <= 0.5x the floor, warm-pool relaunch <= 0.3 s, first launch <= 0.5 s.

    python benchmarks/launch_latency.py [--repeats 5] [--no-kernel]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import textwrap
import time

import torch.distributed as dist
import torch.multiprocessing as mp

from notebook_launcher import notebook_launch
from notebook_launcher.launch.warm.pool import release_warm_pool

THINK = 0.5


def one_barrier() -> int:
    from notebook_launcher import Accelerator

    acc = Accelerator()
    acc.wait_for_everyone()
    return acc.process_index


def _raw_worker(rank: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    dist.barrier()
    dist.destroy_process_group()


def raw_floor() -> float:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.perf_counter()
    mp.start_processes(_raw_worker, args=(port,), nprocs=2, start_method="fork")
    return time.perf_counter() - start


def ours(start_method: str) -> float:
    start = time.perf_counter()
    result = notebook_launch(one_barrier, num_processes=2, start_method=start_method, quiet=True)
    took = time.perf_counter() - start
    assert list(result) == [0, 1]
    return took


def accelerate_time(port: int | None = None) -> float | None:
    """Accelerate's notebook_launcher, timed; on `port` (its default is 29500, which another program on
    a shared machine may hold)."""
    try:
        from accelerate import notebook_launcher as hf_launch
    except ImportError:
        return None

    def job():
        from accelerate import Accelerator

        Accelerator(cpu=True).wait_for_everyone()

    start = time.perf_counter()
    hf_launch(job, num_processes=2, **({"use_port": str(port)} if port else {}))
    return time.perf_counter() - start


KERNEL_CELLS = [
    "import torch\nfrom notebook_launcher import notebook_launch, Accelerator",
    textwrap.dedent(
        """
        def one_barrier():
            acc = Accelerator()
            acc.wait_for_everyone()
            return acc.process_index
        """
    ),
    "import time\n_t = time.perf_counter()\nnotebook_launch(one_barrier, num_processes=2, quiet=True)\n"
    "print('FIRST', time.perf_counter() - _t)",
    "import time\n_t = time.perf_counter()\nnotebook_launch(one_barrier, num_processes=2, quiet=True)\n"
    "print('SECOND', time.perf_counter() - _t)",
]


def first_launch_in_a_kernel() -> tuple[float, float] | None:
    """(first, second) launch in a fresh Jupyter kernel, timed inside the kernel."""
    try:
        from jupyter_client.manager import start_new_kernel
    except ImportError:
        return None
    km, kc = start_new_kernel(kernel_name="python3")
    try:
        seen: dict[str, float] = {}
        for index, cell in enumerate(KERNEL_CELLS):
            if index == 2:
                time.sleep(THINK)  # the user types the launch cell
            if index == 3:
                time.sleep(3.0)  # the idle kernel finishes its warm-up import meanwhile
            kc.execute_interactive(cell, timeout=300, output_hook=lambda msg: _collect(msg, seen))
        return seen["FIRST"], seen["SECOND"]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _collect(msg: dict, seen: dict[str, float]) -> None:
    if msg["msg_type"] == "stream":
        for line in msg["content"]["text"].splitlines():
            name, _, value = line.partition(" ")
            if name in ("FIRST", "SECOND"):
                seen[name] = float(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-kernel", action="store_true", help="skip the Jupyter kernel measurement")
    args = parser.parse_args()
    first_fork = ours("fork")  # a script: the one-time warm-up imports happen before this first fork
    first_pool = ours("forkserver")  # the server starts and imports torch
    floor, fork, pool = [], [], []
    for _ in range(args.repeats):  # alternate, so load changes hit every contender alike
        for times, measure in (
            (floor, raw_floor),
            (fork, lambda: ours("fork")),
            (pool, lambda: ours("forkserver")),
        ):
            time.sleep(THINK)
            times.append(measure())
    release_warm_pool()
    spawn_first = ours("spawn")
    spawn = [ours("spawn") for _ in range(max(1, args.repeats // 2))]
    hf = accelerate_time()
    kernel = None if args.no_kernel else first_launch_in_a_kernel()
    f, s, w = statistics.median(floor), statistics.median(fork), statistics.median(pool)
    print(
        f"torch {__import__('torch').__version__}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, {sys.version.split()[0]}"
    )
    print(f"raw floor (fork + init_process_group + barrier):   {f:6.3f} s (median of {args.repeats})")
    print(f"notebook_launch fork, relaunch:                    {s:6.3f} s  = {s / f:.2f}x the floor")
    print(f"warm pool (forkserver), relaunch:                  {w:6.3f} s  = {w / f:.2f}x the floor")
    print(
        f"notebook_launch fork, first launch in a script:    {first_fork:6.3f} s (imports torch._dynamo first)"
    )
    if kernel is not None:
        print(
            f"notebook_launch fork, first launch in a kernel:    {kernel[0]:6.3f} s (second: {kernel[1]:.3f} s)"
        )
    print(f"warm pool, first launch (server starts):           {first_pool:6.3f} s")
    print(
        f"spawn, first / relaunch:                           {spawn_first:6.3f} s / {statistics.median(spawn):.3f} s"
    )
    if hf is None:
        print("Accelerate notebook_launcher:                      not installed")
    else:
        print(f"Accelerate notebook_launcher:                      {hf:6.3f} s; ours fork = {s / hf:.2f}x")


if __name__ == "__main__":
    main()
