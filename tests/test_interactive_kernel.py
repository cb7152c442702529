"""%ranks / %%ranks in a real Jupyter kernel (issue 15): the magic sequence, training spread over
cells, errors, the stop button, pull/push, and a kernel left with no process and no fd."""

from __future__ import annotations

import ast
import os
import re
import textwrap
import time

import psutil
import pytest
from kernel_session import KernelSession
from live_processes import live_children, pid_is_live

pytestmark = pytest.mark.slow

SETUP = "%load_ext notebook_launcher\n%ranks start 2 --mixed_precision no"
COLLECTIVE = textwrap.dedent(
    """
    %%ranks
    import torch, torch.distributed as dist
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    print('sum', t.item())
    """
).strip()

# The same training, as one function for notebook_launch and as three %%ranks cells.
BUILD = """
import torch, torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from notebook_launcher import Accelerator
acc = Accelerator()
torch.manual_seed(0)
data = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
model = nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
model, opt, loader = acc.prepare(model, opt, DataLoader(data, batch_size=16, shuffle=True))
def epoch():
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        acc.backward(loss)
        opt.step()
        opt.zero_grad()
    return loss.item()
"""
FINISH = "weights = {k: v.detach().clone() for k, v in acc.unwrap_model(model).state_dict().items()}"


def _check(run, *expected: str) -> None:
    assert run.error is None, f"{run.error['ename']}: {run.error['evalue']}\n{run.text}"
    for text in expected:
        assert text in run.text, f"{text!r} not in the cell's output:\n{run.text}"


def _children(pid: int) -> list[psutil.Process]:
    try:
        return live_children(psutil.Process(pid))
    except psutil.NoSuchProcess:
        return []


def _wait_gone(pids: list[int], seconds: float = 15) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        alive = [p for p in pids if pid_is_live(p)]
        if not alive:
            return []
        time.sleep(0.1)
    return alive


@pytest.fixture(scope="module")
def session(kernel):
    _check(kernel.run(SETUP), "rank 0: idle", "rank 1: idle")
    yield kernel
    kernel.run("%ranks stop")


def test_the_magic_sequence(session):
    run = session.run(
        "%%ranks\nfrom notebook_launcher import Accelerator\nacc = Accelerator()\n"
        "print('rank', acc.process_index, 'of', acc.num_processes)\nacc.process_index * 10"
    )
    _check(run, "[rank0] rank 0 of 2", "[rank1] rank 1 of 2", "[rank0] 0", "[rank1] 10")
    run = session.run("%%ranks 1\nonly_one = 'here'\nprint('just rank', acc.process_index)")
    _check(run, "[rank1] just rank 1")
    assert "[rank0]" not in run.text
    _check(session.run(COLLECTIVE), "[rank0] sum 3.0", "[rank1] sum 3.0")
    _check(session.run("%ranks status"), "2 processes", "rank 0: idle", "backend gloo")


def test_pull_and_push_tensors_and_objects(session):
    _check(session.run("%%ranks\nimport torch\nt = torch.arange(3.0) + acc.process_index"))
    _check(
        session.run("%ranks pull t\nprint([x.tolist() for x in t], t[0].device)"),
        "[[0.0, 1.0, 2.0], [1.0, 2.0, 3.0]] cpu",
    )
    define = "class Settings:\n    def __init__(self, lr): self.lr = lr\nsettings = Settings(0.5)\nscale = 4"
    _check(session.run(define + "\n%ranks push settings scale"))
    _check(
        session.run("%%ranks\nprint(settings.lr * scale + acc.process_index)"), "[rank0] 2.0", "[rank1] 3.0"
    )
    _check(session.run("%%ranks\nclass Made:\n    n = 7\nmade = Made()"))
    _check(session.run("%ranks pull made\nprint([m.n for m in made])"), "[7, 7]")
    run = session.run("%ranks push not_defined_here")  # IPython shows a UsageError as its message only
    assert "UsageError: %ranks push: 'not_defined_here' is not defined in this notebook." in run.stderr


def test_an_error_on_one_rank_then_a_working_cell(session):
    run = session.run(
        "%%ranks\nif acc.process_index == 1:\n    raise ValueError('only rank one fails')\nprint('fine')"
    )
    assert run.error["ename"] == "RankError"
    shown = "\n".join(run.error["traceback"])
    assert "--- rank 1 ---" in shown and "raise ValueError('only rank one fails')" in shown
    assert "rank_process.py" not in shown and "group.py" not in shown  # the user's frames only
    assert "[rank0] fine" in run.text
    _check(session.run(COLLECTIVE), "[rank0] sum 3.0", "[rank1] sum 3.0")


def test_an_error_inside_ddp_is_folded_like_a_launchs(session):
    """Issue 20: the ranks' traceback reads like IPython's, torch's frames folded, all of them in
    `.full_traceback`."""
    cell = (
        "%%ranks\nimport torch, torch.nn as nn\nfrom notebook_launcher import Accelerator\n"
        "class Net(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.lin = nn.Linear(2, 2)\n"
        "    def forward(self, x):\n        raise ValueError('bad forward')\n"
        "ddp = Accelerator().prepare(Net())\nddp(torch.ones(3, 2))"
    )
    run = session.run(cell)
    assert run.error["ename"] == "RankError", run.text
    raw = "\n".join(run.error["traceback"])
    assert "\x1b[0;31mValueError\x1b[0m: bad forward" in raw
    shown = re.sub(r"\x1b\[[0-9;]*m", "", raw)
    assert (
        re.search(r"%%ranks In\[\d+\], line 10\n", shown)
        and "----> 8     raise ValueError('bad forward')" in shown
    )
    assert re.search(r"\n    … \d+ frames in torch …\n", shown) and "distributed.py" not in shown
    full = session.run("import sys\nprint(sys.last_value.full_traceback)").stdout
    assert "--- rank 0 ---" in full and "in _run_ddp_forward" in full and "\x1b[" not in full


def test_the_stop_button_interrupts_every_rank_then_a_working_cell(session):
    cell = "%%ranks\nimport time\nfor i in range(600):\n    print('tick', i, flush=True)\n    time.sleep(0.1)"
    run = session.run(cell, interrupt_after_output="tick 3")
    assert run.status == "interrupted" and run.error["ename"] == "CellInterrupted"
    shown = "\n".join(run.error["traceback"])
    assert "ready for the next cell" in shown and "time.sleep(0.1)" in shown
    assert "tick 100" not in run.text
    _check(session.run(COLLECTIVE), "[rank0] sum 3.0", "[rank1] sum 3.0")


def test_training_across_three_cells_matches_one_launch(session):
    for cell in (BUILD, "epoch()", "epoch()\n" + FINISH):
        _check(session.run("%%ranks\n" + cell))
    _check(session.run("%ranks pull weights"))
    launch = (
        "from notebook_launcher import notebook_launch\n"
        "def train():\n"
        + textwrap.indent(BUILD + "epoch()\nepoch()\n" + FINISH + "\nreturn weights", "    ")
        + "\nresult = notebook_launch(train, num_processes=2, quiet=True)\n"
        "print('EQUAL', [all(torch.equal(w[k], r[k]) for k in w) for w, r in zip(weights, result)])\n"
        "print('MOVED', not torch.equal(weights[0]['weight'], torch.nn.Linear(8, 1).weight))"
    )
    # Same code, same seeds, same world: the same floating-point operations in the same order, so
    # the weights are bitwise equal (no tolerance needed).
    _check(session.run("import torch\n" + launch), "EQUAL [True, True]", "MOVED True")


def test_values_shown_by_a_cell_are_the_ranks_reprs(session):
    run = session.run("%%ranks\n{'rank': acc.process_index}")
    _check(run, "[rank0] {'rank': 0}", "[rank1] {'rank': 1}")
    assert ast.literal_eval(run.stdout.split("[rank1] ")[1].splitlines()[0]) == {"rank": 1}


def test_a_rank_that_dies_says_restart_and_restart_works(session):
    run = session.run("%%ranks\nimport os\nif acc.process_index == 1:\n    os._exit(7)")
    assert run.error["ename"] == "RanksBroken"
    assert "rank 1 exited (exit code 7)" in run.error["evalue"] and "%ranks restart" in run.error["evalue"]
    run = session.run("%%ranks\nprint('refused')")
    assert run.error["ename"] == "RanksBroken"
    _check(session.run("%ranks restart"), "rank 1: idle")
    _check(session.run(COLLECTIVE), "[rank1] sum 3.0")
    _check(session.run("%ranks stop"), "ranks: stopped")  # the restarted ranks are this test's own


def _pipe_and_socket_fds(pid: int) -> dict[str, str]:
    found = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith(("pipe:", "socket:")):
            found[fd] = target
    return found


def test_twenty_cells_and_stop_leave_no_process_and_no_fd(kernel):
    _check(kernel.run("%load_ext notebook_launcher\n%ranks stop"))  # (loaded already when run with the rest)
    before_fds = _pipe_and_socket_fds(kernel.pid)
    _check(kernel.run("%ranks start 2"))
    pids = kernel.value(
        "[r.process.pid for r in get_ipython().magics_manager.registry['RanksMagics'].ranks._group.ranks]"
    )
    assert len(_children(kernel.pid)) == 2
    for i in range(20):
        _check(kernel.run(f"%%ranks\nprint('cell {i}')"), f"[rank1] cell {i}")
    _check(kernel.run("%ranks stop"), "ranks: stopped")
    assert _wait_gone(pids) == [] and _children(kernel.pid) == []
    new = {fd: t for fd, t in _pipe_and_socket_fds(kernel.pid).items() if before_fds.get(fd) != t}
    assert new == {}, f"pipes or sockets left open in the kernel: {new}"


def test_kernel_shutdown_ends_the_ranks(tmp_path):
    """Graceful shutdown (atexit) and a killed kernel (the ranks die with their parent)."""
    for now in (False, True):
        session = KernelSession(cwd=str(tmp_path))
        try:
            _check(session.run(SETUP))
            pids = [p.pid for p in _children(session.pid)]
            assert len(pids) == 2
        finally:
            session.kc.stop_channels()
            session.km.shutdown_kernel(now=now)
        assert _wait_gone(pids) == [], f"ranks outlived the kernel (shutdown now={now})"
