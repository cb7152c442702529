"""Launch latency: from the call until every rank passed one barrier and the call returned.

2 CPU ranks; first launch and relaunch; fork and spawn paths; printed beside the raw floor
(torch.multiprocessing fork + init_process_group + barrier, measured in the same run) and beside
Accelerate's notebook_launcher when it is installed. Goals: fork <= 1.2x the floor, <= 0.5x
Accelerate. Run it as a script (spawn needs the __main__ guard):

    python benchmarks/launch_latency.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time

import torch.distributed as dist
import torch.multiprocessing as mp

from notebook_launcher import notebook_launch


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
    assert list(result) == [0, 1]
    return time.perf_counter() - start


def accelerate_time() -> float | None:
    try:
        from accelerate import notebook_launcher as hf_launch
    except ImportError:
        return None

    def job():
        from accelerate import Accelerator

        Accelerator(cpu=True).wait_for_everyone()

    start = time.perf_counter()
    hf_launch(job, num_processes=2)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    first_fork = ours("fork")  # includes the one-time warm-up imports in this process
    floor = [raw_floor() for _ in range(args.repeats)]
    fork = [ours("fork") for _ in range(args.repeats)]
    spawn_first = ours("spawn")
    spawn = [ours("spawn") for _ in range(max(1, args.repeats // 2))]
    hf = accelerate_time()
    f, s = statistics.median(floor), statistics.median(fork)
    print(f"raw floor (fork + init_process_group + barrier): {f:6.3f} s (median of {args.repeats})")
    print(f"notebook_launch fork, first launch:              {first_fork:6.3f} s")
    print(f"notebook_launch fork, relaunch:                  {s:6.3f} s  = {s / f:.2f}x the floor")
    print(
        f"notebook_launch spawn, first / relaunch:         {spawn_first:6.3f} s / {statistics.median(spawn):.3f} s"
    )
    if hf is None:
        print("Accelerate notebook_launcher:                    not installed")
    else:
        print(f"Accelerate notebook_launcher:                    {hf:6.3f} s; ours fork = {s / hf:.2f}x")


if __name__ == "__main__":
    main()
