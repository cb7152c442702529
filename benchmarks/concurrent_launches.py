"""Launches at once on one machine: how many fail, ours beside raw torch doing the same.

Each of `--loops` processes runs `--launches` two-rank launches one after another, all loops at the
same time (more loops than cores loads the machine); every launch's ranks form a gloo group and
return. Printed per side: launches run, launches failed, and the first failure's message.

- raw torch: two forked ranks per launch meet in a FileStore of their own (a fresh temp file),
  call init_process_group and destroy_process_group.
- raw torch, TORCH_DIST_INIT_BARRIER=1: the same with torch's barrier at the end of its
  initialisation (off by default).
- ours: notebook_launch, each rank making an Accelerator.

A rank that returns from init_process_group can exit while its peer is still accepting the gloo
connection it made, and the peer fails: "Gloo connectFullMesh failed ... Connection closed by peer".
One loop on a machine loaded by three busy processes shows it too, so it is load, not launches
pairing with each other. runtime/world/state.py ends our initialisation with a barrier.

    .venv/bin/python benchmarks/concurrent_launches.py --loops 4 --launches 1500

Issue 33, 2026-12-05, 2 cores, 4 loops x 300: see benchmarks/README.md.
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

    try:
        store = dist.FileStore(path, 2)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=2)
        dist.destroy_process_group()
    except Exception as exc:  # its first line, for the loop to show; the exit code says it failed
        with open(f"{path}.rank{rank}.error", "w") as handle:
            handle.write(str(exc).splitlines()[0][:300])
        os._exit(1)


def _raw_loop(launches: int, queue: multiprocessing.Queue, init_barrier: bool = False) -> None:
    import torch.distributed  # noqa: F401  (imported once, before the forks, as a notebook would)

    os.environ["TORCH_DIST_INIT_BARRIER"] = "1" if init_barrier else "0"

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
            for rank in range(2):
                if not first and os.path.exists(f"{path}.rank{rank}.error"):
                    first = f"rank {rank}: " + open(f"{path}.rank{rank}.error").read()
            first = first or f"exit codes {codes}"
        for leftover in (path, f"{path}.rank0.error", f"{path}.rank1.error"):
            if os.path.exists(leftover):
                os.unlink(leftover)
    queue.put((launches, failed, first))


def _raw_loop_with_init_barrier(launches: int, queue: multiprocessing.Queue) -> None:
    _raw_loop(launches, queue, init_barrier=True)


SIDES = {
    "raw torch": _raw_loop,
    "raw torch, TORCH_DIST_INIT_BARRIER=1": _raw_loop_with_init_barrier,
    "ours": _ours_loop,
}


def _run(side: str, loops: int, launches: int) -> tuple[int, int, str, float]:
    context = multiprocessing.get_context("fork")
    queue: multiprocessing.Queue = context.Queue()
    started = time.perf_counter()
    workers = [context.Process(target=SIDES[side], args=(launches, queue)) for _ in range(loops)]
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
    for side in SIDES:
        total, failed, first, seconds = _run(side, args.loops, args.launches)
        print(
            f"{side:37s} {total} launches in {seconds:.0f} s, {failed} failed"
            + (f": {first}" if first else "")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
