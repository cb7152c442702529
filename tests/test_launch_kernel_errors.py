"""What a person sees in the cell when a launch fails, is stopped or is interrupted (issue 11,
section 7): one line of ours, then what the workers said; no frame of the launcher's modules.
Checked on the traceback a real kernel sends for the cell, as a notebook front end renders it."""

from __future__ import annotations

import re
import textwrap

import pytest

pytestmark = pytest.mark.slow

ANSI = re.compile(r"\x1b\[[0-9;]*m")
LAUNCHER_MODULES = (
    "supervisor.py",
    "notebook.py",
    "handle.py",
    "processes.py",
    "launch/worker/entry.py",
    "multiprocessing",
)

DEFINE = textwrap.dedent(
    """
    import time
    import torch.distributed as dist
    from notebook_launcher import notebook_launch, start_launch, Accelerator

    def broken():
        acc = Accelerator()
        if acc.process_index == 1:
            raise RuntimeError("bad batch on rank one")
        dist.barrier()

    def forever():
        acc = Accelerator()
        print(f"started {acc.process_index}", flush=True)
        while True:
            time.sleep(0.1)
    """
)


def _shown(run) -> list[str]:
    """The cell's error as the notebook shows it, colours removed, one entry per line."""
    assert run.error is not None, run.text
    return ANSI.sub("", "\n".join(run.error["traceback"])).splitlines()


def _no_launcher_frames(lines: list[str]) -> None:
    shown = "\n".join(lines)
    assert not [m for m in LAUNCHER_MODULES if m in shown], shown


def test_a_failing_rank_shows_one_line_and_the_workers_own_traceback(kernel):
    kernel.run(DEFINE)
    lines = _shown(kernel.run("notebook_launch(broken, num_processes=2)", timeout=90))
    assert lines[0] == "WorkerError: rank 1 raised RuntimeError: bad batch on rank one"
    assert lines[1:3] == ["--- traceback of rank 1 ---", "Traceback (most recent call last):"]
    # The cell's own frame, labelled the way IPython labels local ones, with its source line.
    assert re.fullmatch(r"  Cell In\[\d+\], line 8, in broken", lines[3]), lines
    assert lines[4:] == [
        '    raise RuntimeError("bad batch on rank one")',
        "RuntimeError: bad batch on rank one",
    ]
    _no_launcher_frames(lines)


def test_the_cause_is_the_workers_exception(kernel):
    kernel.run(DEFINE)
    run = kernel.run(
        "try:\n    notebook_launch(broken, num_processes=2)\n"
        "except Exception as err:\n    print(type(err.__cause__).__name__, err.__cause__)",
        timeout=90,
    )
    assert run.error is None and "RuntimeError bad batch on rank one" in run.stdout, run.text


def test_interrupting_shows_one_line_and_where_each_rank_was(kernel):
    kernel.run(DEFINE)
    # Both ranks in their loop (rank 1 can print before rank 0 has left Accelerator()).
    run = kernel.run(
        "notebook_launch(forever, num_processes=2)",
        timeout=60,
        interrupt_after_output=("[rank0] started 0", "[rank1] started 1"),
    )
    lines = _shown(run)
    assert lines[0] == "KeyboardInterrupt: the launch was interrupted; every worker has been stopped."
    for rank in (0, 1):
        where = lines.index(f"--- where rank {rank} was ---")
        assert re.fullmatch(r"  Cell In\[\d+\], line 15 in forever", lines[where + 2]), lines
        assert lines[where + 3] == "    time.sleep(0.1)"
    _no_launcher_frames(lines)


def test_the_stop_button_shows_one_line_and_where_each_rank_was(kernel):
    kernel.run(DEFINE)
    # RunView's Stop button calls handle.stop(); wait() then raises in the cell.
    run = kernel.run(
        "import threading\n"
        "started = threading.Event()\n"
        "def watch(event):\n    if getattr(event, 'text', None) == 'started 1':\n        started.set()\n"
        "handle = start_launch(forever, num_processes=2, quiet=True, observers=[watch])\n"
        "started.wait(60); handle.stop(); handle.wait(60)",
        timeout=90,
    )
    lines = _shown(run)
    assert lines[0] == "LaunchStopped: The launch was stopped on request; all workers have been terminated."
    assert "--- where rank 1 was ---" in lines and "    time.sleep(0.1)" in lines
    _no_launcher_frames(lines)
