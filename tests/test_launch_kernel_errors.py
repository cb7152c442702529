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


def _assert_in_forever(lines: list[str], rank: int) -> None:
    """Rank `rank`'s innermost frame of the user's is in `forever`: in its loop, or still returning
    from the print whose line the test waited for (a loaded machine can hold a rank there)."""
    where = lines.index(f"--- where rank {rank} was ---")
    frame = re.fullmatch(r"  Cell In\[\d+\], line (\d+) in forever", lines[where + 2])
    assert frame, lines
    source = {"13": '    print(f"started {acc.process_index}", flush=True)', "15": "    time.sleep(0.1)"}
    assert lines[where + 3] == source.get(frame[1]), lines


def test_a_failing_rank_shows_one_line_and_the_workers_own_traceback(kernel):
    kernel.run(DEFINE)
    lines = _shown(kernel.run("notebook_launch(broken, num_processes=2)", timeout=90))
    assert lines[0] == "WorkerError: rank 1 raised RuntimeError: bad batch on rank one"
    assert lines[1] == "--- traceback of rank 1 ---"
    assert re.fullmatch(r"RuntimeError +Traceback \(most recent call last\)", lines[2]), lines
    # The cell's own frame, labelled the way IPython labels local ones, with its source lines
    # (IPython's layout, issue 20: context, an arrow at the failing line).
    assert re.fullmatch(r"Cell In\[\d+\], line 8, in broken\(\)", lines[3]), lines
    assert lines[4:] == [
        "      6 acc = Accelerator()",
        "      7 if acc.process_index == 1:",
        '----> 8     raise RuntimeError("bad batch on rank one")',
        "",
        "RuntimeError: bad batch on rank one",
    ]
    _no_launcher_frames(lines)


DDP = textwrap.dedent(
    """
    import torch, torch.nn as nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)

        def forward(self, x):
            raise ValueError(f"bad forward on {x.shape[0]} rows")

    def train_ddp():
        model = Accelerator().prepare(Net())
        return model(torch.ones(3, 2))
    """
)


def test_a_failure_inside_ddp_shows_the_users_frames_folds_torchs_and_keeps_them_all(kernel):
    """Issue 20: coloured like IPython's, the user's frames with their source, DDP's and torch's
    frames folded into one line; `.full_traceback` has every frame."""
    kernel.run(DEFINE)
    kernel.run(DDP)
    run = kernel.run("notebook_launch(train_ddp, num_processes=2)", timeout=90)
    raw = "\n".join(run.error["traceback"])
    assert "\x1b[0;31mValueError\x1b[0m: bad forward on 3 rows" in raw  # IPython's colour for the name
    lines = _shown(run)
    user = [i for i, line in enumerate(lines) if re.fullmatch(r"Cell In\[\d+\], line \d+, in .*", line)]
    assert [re.sub(r"In\[\d+\]", "In[N]", lines[i]) for i in user] == [
        "Cell In[N], line 13, in train_ddp()",
        "Cell In[N], line 9, in Net.forward(self, x)",
    ], lines
    assert "---> 13     return model(torch.ones(3, 2))" in lines
    assert '----> 9     raise ValueError(f"bad forward on {x.shape[0]} rows")' in lines
    folded = [line for line in lines if "frames in" in line]
    assert len(folded) == 1 and re.fullmatch(r"    … (\d+) frames in torch …", folded[0]), lines
    assert "distributed.py" not in raw and "module.py" not in raw
    assert any(
        line.startswith("Library frames are folded; every frame: err.full_traceback") for line in lines
    )
    _no_launcher_frames(lines)
    # Every frame, plain, one attribute away.
    full = kernel.run("import sys\nprint(sys.last_value.full_traceback)").stdout
    assert (
        "\x1b[" not in full and "torch/nn/parallel/distributed.py" in full and "in _run_ddp_forward" in full
    )
    count = int(re.search(r"(\d+) frames", folded[0])[1])
    assert len(re.findall(r'^  File "', full, re.M)) == count + 2, full


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
        _assert_in_forever(lines, rank)
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
    for rank in (0, 1):
        _assert_in_forever(lines, rank)
    _no_launcher_frames(lines)
