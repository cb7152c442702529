"""Launch tail: many relaunches of a 2-rank job that forms a gloo group, and the slowest of them.

The contenders, interleaved (one of each per round, so load changes hit them alike), each timed
from the call until every rank passed a barrier and the call returned:

- raw: torch.multiprocessing fork + init_process_group + barrier (rank 0 hosts the TCPStore);
- notebook_launch with fork (the default) and with the warm pool (start_method="forkserver");
- Accelerate's notebook_launcher (torch elastic), when it is installed.

For each: p50, p99, max and how many took over 2 s. `--load 2` runs the same with two busy
processes beside it. The 5 s tail this measures was a reverse DNS lookup in every TCPStore
connection (system/store.py); the machine's load averages are printed with the figures.

    python benchmarks/launch_tail.py [--relaunches 300] [--load 0|2] [--no-accelerate]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import socket
import statistics
import sys
import time
from collections.abc import Callable

from launch_latency import accelerate_time, ours, raw_floor

from notebook_launcher.launch.warm.pool import release_warm_pool

SLOW = 2.0  # seconds: a launch this long is a tail, whatever the machine


def spin(until: float) -> None:
    """A busy process: one core's worth of load until `until`."""
    while time.time() < until:
        pass


def percentile(times: list[float], q: float) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def measure(
    contenders: dict[str, Callable[[], float | None]], relaunches: int
) -> tuple[dict[str, list[float]], dict[str, list[str]]]:
    """Each contender's times, and its launches that raised (counted apart, never retried)."""
    times: dict[str, list[float]] = {name: [] for name in contenders}
    errors: dict[str, list[str]] = {name: [] for name in contenders}
    for _ in range(relaunches):
        for name, launch in contenders.items():
            try:
                took = launch()
            except Exception as exc:
                errors[name].append(f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
                continue
            if took is not None:
                times[name].append(took)
    return times, errors


def report(times: dict[str, list[float]], errors: dict[str, list[str]], floor_p50: float) -> None:
    print(f"{'':30}{'p50':>8}{'p99':>8}{'max':>8}  over {SLOW:g} s  p50 / raw p50  errors")
    for name, values in times.items():
        if not values:
            continue
        p50 = statistics.median(values)
        print(
            f"{name:30}{p50:8.3f}{percentile(values, 0.99):8.3f}{max(values):8.2f}"
            f"  {sum(t > SLOW for t in values):3d} of {len(values):<5d}{p50 / floor_p50:8.2f}x{len(errors[name]):9d}"
        )
    for name, messages in errors.items():
        for message in sorted(set(messages)):
            print(f"  {name}: {messages.count(message)} x {message}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--relaunches", type=int, default=300, help="relaunches per contender (default 300)")
    parser.add_argument("--load", type=int, default=0, help="busy processes beside the launches (e.g. 2)")
    parser.add_argument("--no-accelerate", action="store_true", help="leave Accelerate's launcher out")
    args = parser.parse_args()
    ours("fork"), ours("forkserver")  # one-time imports; the warm pool's server starts
    contenders: dict[str, Callable[[], float | None]] = {
        "raw fork + init_process_group": raw_floor,
        "notebook_launch (fork)": lambda: ours("fork"),
        "notebook_launch (warm pool)": lambda: ours("forkserver"),
    }
    if not args.no_accelerate:
        contenders["Accelerate notebook_launcher"] = lambda: accelerate_time(free_port())
    busy = [
        multiprocessing.get_context("fork").Process(target=spin, args=(time.time() + 3600,), daemon=True)
        for _ in range(args.load)
    ]
    for process in busy:
        process.start()
    load_before = os.getloadavg()
    began = time.monotonic()
    try:
        times, errors = measure(contenders, args.relaunches)
    finally:
        for process in busy:
            process.kill()
        release_warm_pool()
    print(
        f"torch {__import__('torch').__version__}, {os.cpu_count()} CPUs, {args.load} busy processes beside, "
        f"{args.relaunches} relaunches each in {time.monotonic() - began:.0f} s; load average before "
        f"{load_before[0]:.1f}, after {os.getloadavg()[0]:.1f} (1 min), Python {sys.version.split()[0]}"
    )
    report(times, errors, statistics.median(times["raw fork + init_process_group"]))


if __name__ == "__main__":
    main()
