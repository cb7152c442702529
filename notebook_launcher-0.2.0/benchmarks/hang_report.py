"""Figures for the hang report (not part of the test suite): inject each kind of hang N times into
3 gloo CPU processes and count how often the verdict names it correctly, and how long after the
stall began the report arrived.

    python benchmarks/hang_report.py            # 20 runs per kind, ~10 minutes on 2 busy cores
    python benchmarks/hang_report.py --runs 3   # a quick look

Kinds: a rank skipping a barrier (missing), mismatched collectives (all_reduce vs broadcast), a rank
sleeping in a Dataset's __getitem__ (missing, named at __getitem__), a rank late for the rendezvous,
every rank busy in its own code, and a slow but progressing run (must give no report). The stall
begins at the stuck rank's last output line ("stall <time>"); latency = report - that - stall_timeout.
A report before that line is a real stall too (start-up taking longer than STALL on a busy machine):
it is counted apart, and the first report after the line is the one judged.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.distributed as dist

from notebook_launcher import Accelerator, notebook_launch
from notebook_launcher.launch.events import HangReported, OutputLine
from notebook_launcher.launch.result import LaunchTimeout

STALL = 1.0
HANG = 4 * STALL


def _mark() -> None:
    print(f"stall {time.time()}", flush=True)  # the last progress before the stall


def skip_barrier() -> None:
    rank = Accelerator().process_index
    for _ in range(3):
        dist.all_reduce(torch.ones(1))
    if rank == 1:
        _mark()
        time.sleep(HANG)
    dist.barrier()


def mismatch() -> None:
    rank = Accelerator().process_index
    dist.all_reduce(torch.ones(1))
    if rank == 2:
        _mark()
        dist.broadcast(torch.ones(4), src=0)
    else:
        dist.all_reduce(torch.ones(4))


class _Slow(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 12

    def __getitem__(self, index: int) -> torch.Tensor:
        if index == 7:  # rank 1's third batch
            _mark()
            time.sleep(HANG)
        return torch.tensor([float(index)])


def getitem() -> None:
    accelerator = Accelerator()
    for batch in accelerator.prepare(torch.utils.data.DataLoader(_Slow(), batch_size=1)):
        accelerator.reduce(batch)


def rendezvous() -> None:
    import os

    if os.environ["RANK"] == "2":
        _mark()
        time.sleep(HANG)
    Accelerator()


def busy() -> None:
    Accelerator()
    dist.barrier()
    _mark()
    time.sleep(HANG)


def progressing() -> None:
    Accelerator()
    for step in range(10):
        time.sleep(STALL / 3)
        dist.all_reduce(torch.ones(1))
        print(f"step {step}", flush=True)


CASES = {
    "skip_barrier": (
        skip_barrier,
        "missing",
        "rank 1 never reached barrier #4, which ranks 0, 2 have waited in",
    ),
    "mismatch": (mismatch, "mismatch", "ranks 0, 1 in all_reduce #2; rank 2 in broadcast #2"),
    "getitem": (getitem, "missing", "rank 1 is at __getitem__"),
    "rendezvous": (rendezvous, "rendezvous", "rank 2 never joined the rendezvous"),
    "busy": (busy, "busy", "every rank is busy in its own code"),
    "progressing": (progressing, None, None),
}


def one_run(fn) -> tuple[list, list, float | None]:
    """(reports of the injected stall, reports before it, latency of the first one)."""
    reports, marks = [], []

    def observe(event) -> None:
        if isinstance(event, HangReported) and event.report.reason == "stall":
            reports.append((time.time(), event.report))
        elif isinstance(event, OutputLine) and event.text.startswith("stall "):
            marks.append(float(event.text.split()[1]))

    try:
        notebook_launch(
            fn, num_processes=3, stall_timeout=STALL, timeout=HANG + 4, observers=[observe], quiet=True
        )
    except LaunchTimeout:
        pass  # the mismatch never resolves: timeout= ends it
    mark = marks[0] if marks else float("inf")
    after = [(at, r) for at, r in reports if at >= mark]
    before = [r for at, r in reports if at < mark]  # a real stall of STALL s in start-up on a busy machine
    latency = after[0][0] - mark - STALL if after else None
    return [r for _, r in after], before, latency


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--only", nargs="*", default=list(CASES))
    runs = parser.parse_args()
    for name in runs.only:
        fn, kind, phrase = CASES[name]
        right, latencies, wrong, early = 0, [], [], 0
        for _ in range(runs.runs):
            reports, before, latency = one_run(fn)
            early += bool(before)
            if kind is None:
                ok = not reports and not before
            else:
                ok = len(reports) == 1 and reports[0].kind == kind and phrase in reports[0].verdict
            right += ok
            if latency is not None:
                latencies.append(latency)
            if not ok:
                wrong.append([r.verdict for r in reports])
        spread = (
            f"stall->report beyond stall_timeout: median {statistics.median(latencies):.2f} s, "
            f"max {max(latencies):.2f} s"
            if latencies
            else "no report"
        )
        extra = f"; {early} run(s) also had a report of a start-up stall before it" if early else ""
        print(f"{name}: {right}/{runs.runs} right; {spread}{extra}", flush=True)
        for verdicts in wrong[:3]:
            print(f"    wrong: {verdicts}", flush=True)


if __name__ == "__main__":
    main()
