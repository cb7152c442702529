"""A flood of output in a real Jupyter kernel: 2 ranks x LINES short lines through notebook_launch,
against the kernel printing the same 2 x LINES lines itself, in the same run (issue 20).

Counted on the kernel's iopub channel, for the cell's own messages: stream messages, all output
messages (streams, displays, display updates), and the wall time from execute to idle. The launch's
time also includes starting the ranks, so the same launch printing nothing is timed too: the flood's
own cost is the difference. Goals: <= 50 stream messages per second, a wall time <= 1.5x the
kernel's own (the flood's cost, without the fixed start of the ranks).

    python benchmarks/output_flood.py [--lines 20000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import queue
import statistics
import tempfile
import time

from jupyter_client.manager import KernelManager

SETUP = """
import os
from notebook_launcher import notebook_launch

def flood(lines):
    rank = os.environ["RANK"]
    for i in range(lines):
        print(f"rank {rank} line {i}")
    return lines
notebook_launch(flood, args=(0,), num_processes=2)  # the first launch's one-off warm-up
"""
KERNEL_PRINTS = "for rank in range(2):\n    for i in range({n}):\n        print(f'rank {{rank}} line {{i}}')"
LAUNCH = "r = notebook_launch(flood, args=({n},), num_processes=2); assert r.values == [{n}, {n}]"
OUTPUT_KINDS = ("stream", "display_data", "update_display_data", "clear_output")


def run_cell(client, code: str, timeout: float = 300) -> dict:
    msg_id = client.execute(code)
    started, counts = time.monotonic(), dict.fromkeys(OUTPUT_KINDS, 0)
    while True:
        try:
            msg = client.get_iopub_msg(timeout=timeout)
        except queue.Empty as exc:
            raise TimeoutError(code) from exc
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind = msg["msg_type"]
        if kind == "error":
            raise RuntimeError("\n".join(msg["content"]["traceback"]))
        if kind in counts:
            counts[kind] += 1
        if kind == "status" and msg["content"]["execution_state"] == "idle":
            wall = time.monotonic() - started
            return {"wall": wall, "streams": counts["stream"], "outputs": sum(counts.values())}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lines", type=int, default=20000, help="lines per rank")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    manager = KernelManager(kernel_name="python3")
    manager.start_kernel(cwd=tempfile.mkdtemp())
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        run_cell(client, SETUP)
        rows: dict[str, list[dict]] = {"kernel prints": [], "notebook_launch": [], "launch, no output": []}
        for _ in range(args.repeats):  # alternate the contenders: the machine's load hits all alike
            rows["kernel prints"].append(run_cell(client, KERNEL_PRINTS.format(n=args.lines)))
            rows["notebook_launch"].append(run_cell(client, LAUNCH.format(n=args.lines)))
            rows["launch, no output"].append(run_cell(client, LAUNCH.format(n=0)))
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    median = {
        name: {k: statistics.median(r[k] for r in runs) for k in runs[0]} for name, runs in rows.items()
    }
    print(f"2 ranks x {args.lines:,} lines, median of {args.repeats}")
    print(f"{'':20} {'wall s':>8} {'stream msgs':>12} {'stream msgs/s':>14} {'all outputs':>12}")
    for name, m in median.items():
        print(
            f"{name:20} {m['wall']:8.2f} {m['streams']:12.0f} {m['streams'] / m['wall']:14.1f} {m['outputs']:12.0f}"
        )
    flood_cost = median["notebook_launch"]["wall"] - median["launch, no output"]["wall"]
    own = median["kernel prints"]["wall"]
    print(
        f"the flood's own cost through notebook_launch: {flood_cost:.2f} s = {flood_cost / own:.2f}x the kernel's own"
    )


if __name__ == "__main__":
    main()
