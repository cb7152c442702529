"""Run notebooks/07_cli_and_multinode.ipynb again and again in fresh kernels and count the runs
that did not end (issue 23: once in 7 runs its two-machine cell never ended).

    python benchmarks/notebook07_loop.py            # 20 runs
    python benchmarks/notebook07_loop.py --runs 5 --cell-timeout 300

Each run executes every cell in a new python3 kernel (nbclient) in a fresh folder. A cell that
runs past --cell-timeout counts as a hang; a cell that raises counts as a failure (its error is
printed). Prints one line per run and a closing count; exits 1 when any run hung or failed.
This is a measurement, never an assertion.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import nbclient
import nbformat

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "07_cli_and_multinode.ipynb"


def run_once(cell_timeout: float) -> tuple[str, float, str]:
    """('ok' | 'hang' | 'error', seconds, detail) for one top-to-bottom run."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    with tempfile.TemporaryDirectory(prefix="nb07_loop_") as folder:
        client = nbclient.NotebookClient(
            nb, timeout=cell_timeout, kernel_name="python3", resources={"metadata": {"path": folder}}
        )
        start = time.monotonic()
        try:
            client.execute()
        except nbclient.exceptions.CellTimeoutError as exc:
            return "hang", time.monotonic() - start, str(exc).splitlines()[0]
        except nbclient.exceptions.CellExecutionError as exc:
            return "error", time.monotonic() - start, str(exc)[-2000:]
        return "ok", time.monotonic() - start, ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--cell-timeout", type=float, default=300.0)
    args = parser.parse_args()
    counts = {"ok": 0, "hang": 0, "error": 0}
    for run in range(1, args.runs + 1):
        outcome, took, detail = run_once(args.cell_timeout)
        counts[outcome] += 1
        print(f"run {run:2d}/{args.runs}: {outcome:5s} {took:6.1f} s {detail}", flush=True)
    print(
        f"notebook 07, {args.runs} runs: {counts['ok']} ended normally, {counts['hang']} hung, {counts['error']} failed"
    )
    return 0 if counts["ok"] == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
