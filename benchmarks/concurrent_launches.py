"""Launches at once on one machine: how many fail, ours beside raw torch doing the same.

Each of `--loops` processes runs `--launches` two-rank launches one after another, all loops at the
same time; every launch's ranks form a gloo group and return their rank. Printed per side: launches
run, launches failed, and the first failure's message. The raw side forks two ranks that meet in a
FileStore of their own per launch (a fresh temp file), as ours do; a failure there too says the cause
is below us (torch/gloo), none says it is ours.

    .venv/bin/python benchmarks/concurrent_launches.py --loops 4 --launches 1500

Issue 33, 2026-12-05, 2 cores, 4 loops x 300: raw torch 47 of 1,200 launches failed ("Gloo
connectFullMesh failed ... Connection closed by peer", a rank completing with another launch's), ours
0 of 1,200; in four 1,500-launch loops ours lost one pair of launches in about 3,000.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time


def _ours_loop(launches: int, queue: multiprocessing.Queue) -> None:
    from notebook_launcher import Accelerator, notebook_launch

    def rank() -> int:
        return Accelerator().process_index

    failed, first = 0, ""
    for _ in range(launches):
        try:
            assert list(notebook_launch(rank, num_processes=2, quiet=True)) == [0, 1]
        except Exception as exc:  # counted and shown, never retried
            failed += 1
            first = first or str(exc).splitlines()[0][:300]
    queue.put((launches, failed, first))


def _raw_rank(path: str, rank: int) -> None:
    import torch.distributed as dist

    store = dist.FileStore(path, 2)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2)
    dist.destroy_process_group()


def _raw_loop(launches: int, queue: multiprocessing.Queue) -> None:
    import torch.distributed  # noqa: F401  (imported once, before the forks, as a notebook would)

    context = multiprocessing.get_context("fork")
    failed, first = 0, ""
    for _ in range(launches):
        handle, path = tempfile.mkstemp(prefix="raw-rendezvous-")
        os.close(handle)
        ranks = [context.Process(target=_raw_rank, args=(path, r)) for r in range(2)]
        for process in ranks:
            process.start()
        for process in ranks:
            process.join()
        codes = [process.exitcode for process in ranks]
        if any(codes):
            failed += 1
            first = first or f"exit codes {codes}"
        if os.path.exists(path):
            os.unlink(path)
    queue.put((launches, failed, first))


def _run(side: str, loops: int, launches: int) -> tuple[int, int, str, float]:
    target = _ours_loop if side == "ours" else _raw_loop
    context = multiprocessing.get_context("fork")
    queue: multiprocessing.Queue = context.Queue()
    started = time.perf_counter()
    workers = [context.Process(target=target, args=(launches, queue)) for _ in range(loops)]
    for worker in workers:
        worker.start()
    results = [queue.get() for _ in workers]
    for worker in workers:
        worker.join()
    seconds = time.perf_counter() - started
    return (
        sum(r[0] for r in results),
        sum(r[1] for r in results),
        next((r[2] for r in results if r[2]), ""),
        seconds,
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--loops", type=int, default=4)
    parser.add_argument("--launches", type=int, default=300, help="per loop")
    args = parser.parse_args(argv)
    for side in ("raw torch", "ours"):
        total, failed, first, seconds = _run(side, args.loops, args.launches)
        print(
            f"{side:10s} {total} launches in {seconds:.0f} s, {failed} failed"
            + (f": {first}" if first else "")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
