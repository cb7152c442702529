"""Ranks from Python (issue 15): persistent rank processes with per-rank namespaces, in this process.

Real processes, a real gloo group. One group is shared by the quick checks (module fixture); the
tests that break a group (a rank dies, a collective on some ranks, a start that fails) make their
own. The kernel-side magics are tested in test_interactive_kernel.py.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import psutil
import pytest
import torch

from notebook_launcher import ConfigError, LaunchConfig, save_config
from notebook_launcher.interactive import CellInterrupted, RankError, Ranks, RanksBroken, RanksStartError
from notebook_launcher.system.network import port_is_free

COLLECTIVE = (
    "import torch, torch.distributed as dist\n"
    "t = torch.tensor([float(dist.get_rank() + 1)])\n"
    "dist.all_reduce(t)\n"
    "t.item()"
)


@pytest.fixture(scope="module")
def ranks():
    group = Ranks(2, quiet=True, mixed_precision="bf16", gradient_accumulation_steps=2)
    yield group
    group.stop()


def test_a_namespace_persists_between_calls_and_the_group_is_up(ranks):
    assert ranks.run("from notebook_launcher import Accelerator\nacc = Accelerator()\nacc.process_index") == [
        0,
        1,
    ]
    assert ranks.run("x = acc.num_processes * 10") == [None, None]  # statements: no value
    assert ranks.run("x + acc.process_index") == [20, 21]  # defined in an earlier call, per rank
    assert ranks.run(COLLECTIVE) == [3.0, 3.0]  # the process group is up: 1 + 2 on both ranks


def test_the_launch_config_reaches_accelerator(ranks):
    values = ranks.run(
        "from notebook_launcher import Accelerator\n"
        "a = Accelerator()\n(a.mixed_precision, a.gradient_accumulation_steps, a.num_processes)"
    )
    assert values == [("bf16", 2, 2)] * 2
    assert ranks.config.mixed_precision == "bf16" and ranks.num_processes == 2


def test_some_ranks_only(ranks):
    ranks.run("only = 'unset'")
    assert ranks.run("only = 'rank one'\nonly", ranks=[1]) == ["rank one"]
    assert ranks.pull("only") == ["unset", "rank one"]
    with pytest.raises(ConfigError, match="ranks=5"):
        ranks.run("1", ranks=5)


def test_functions_run_with_their_arguments(ranks):
    def scaled(factor, *, offset=0):
        import torch.distributed as dist

        return dist.get_rank() * factor + offset

    assert ranks.run(scaled, 10, offset=1) == [1, 11]


class Box:
    """A class of this test module: pushed and pulled instances keep their type."""

    def __init__(self, value):
        self.value = value


def test_push_and_pull_tensors_and_objects(ranks):
    weights = torch.arange(6.0).reshape(2, 3)
    ranks.push(weights=weights, box=Box(7))
    assert ranks.run("weights.sum().item() + box.value") == [22.0, 22.0]
    ranks.run("grown = weights * (1 + __import__('torch.distributed').distributed.get_rank())")
    pulled = ranks.pull("grown")
    assert torch.equal(pulled[0], weights) and torch.equal(pulled[1], weights * 2)
    assert all(t.device.type == "cpu" for t in pulled)
    ranks.run("class Cell:\n    def __init__(self, n): self.n = n\nmade = Cell(5)")
    made = ranks.pull("made")  # a class defined on the ranks travels by value
    assert [m.n for m in made] == [5, 5] and type(made[0]).__name__ == "Cell"
    ranks.push({"ranks": "a name that is push()'s keyword"})
    assert ranks.run("ranks") == ["a name that is push()'s keyword"] * 2


def test_gpu_tensors_are_pulled_and_pushed_on_the_cpu(ranks):
    """tests/fake_cuda.py's tensors report cuda:0 (CPU data): pulled, they arrive as CPU tensors,
    moved in the rank; pushed, they reach the ranks as CPU tensors, moved here."""
    from fake_cuda import describe, fake_cuda

    ranks.run("from fake_cuda import fake_cuda, describe")  # the tests folder is on the forked ranks' path
    ranks.run("on_gpu = {'t': fake_cuda(__import__('torch').arange(3.0))}")
    pulled = ranks.pull("on_gpu")
    assert [describe(p["t"]) for p in pulled] == ["Tensor cpu", "Tensor cpu"]
    ranks.push(sent=fake_cuda(torch.ones(2)))
    assert ranks.run("describe(sent)") == ["Tensor cpu", "Tensor cpu"]


def test_an_error_on_one_rank_shows_its_traceback_and_the_ranks_stay_usable(ranks):
    with pytest.raises(RankError) as caught:
        ranks.run(
            "value = 1\nif __import__('torch.distributed').distributed.get_rank() == 1:\n    1 / 0\nvalue"
        )
    error = caught.value
    assert error.rank == 1 and list(error.failures) == [1] and error.finished == [0]
    assert isinstance(error.exception, ZeroDivisionError)
    text = "\n".join(error._render_traceback_())
    assert "1 / 0" in text and "ZeroDivisionError" in text  # the rank's own line, from its cell
    assert "rank_process.py" not in text and "execution.py" not in text  # user frames only
    assert ranks.run(COLLECTIVE) == [3.0, 3.0]  # both ranks alive, the group still works
    with pytest.raises(RankError, match="NameError"):
        ranks.pull("never_defined")


def test_the_stop_button_interrupts_the_cell_on_every_rank(ranks, tmp_path, sigint_raises_keyboard_interrupt):
    marker = tmp_path / "running"
    code = f"import pathlib, time\npathlib.Path({str(marker)!r}).touch()\nwhile True:\n    time.sleep(0.05)"

    def press_stop():  # what the notebook's stop button does to the kernel: SIGINT
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # both ranks are inside the loop by now (one touched the file first)
        os.kill(os.getpid(), signal.SIGINT)

    presser = threading.Thread(target=press_stop)
    presser.start()
    try:
        with pytest.raises(CellInterrupted) as caught:
            ranks.run(code)
    finally:
        presser.join()
    assert caught.value.stuck == []
    assert sorted(caught.value.where) == [0, 1]
    assert all("time.sleep(0.05)" in text for text in caught.value.where.values())  # where each rank was
    assert ranks.run(COLLECTIVE) == [3.0, 3.0]  # the workers survived and the next cell runs


def test_the_stop_button_while_a_big_push_is_being_written_leaves_the_pipes_intact(
    ranks, monkeypatch, sigint_raises_keyboard_interrupt
):
    """Ctrl-C in the middle of writing a command would leave half a message in a rank's pipe; it is
    taken once the command is written, and the ranks stay usable. The press comes from inside the
    write to rank 0 (not from a timer, which under load may fire before the write starts: the
    command is then rightly never sent)."""

    class PressStopWhileWriting:
        def __init__(self, conn):
            self.conn = conn

        def send_bytes(self, blob):
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while the command is being written
            self.conn.send_bytes(blob)

        def __getattr__(self, name):
            return getattr(self.conn, name)

    first = ranks._group.ranks[0]
    monkeypatch.setattr(first, "cmd", PressStopWhileWriting(first.cmd))
    with pytest.raises(KeyboardInterrupt):
        ranks.push(big=b"x" * (64 << 20))  # 64 MB: the pipe takes it in many writes
    monkeypatch.setattr(first, "cmd", first.cmd.conn)
    assert ranks.run("len(big)") == [64 << 20] * 2
    assert ranks.run(COLLECTIVE) == [3.0, 3.0]


@pytest.mark.slow
def test_a_collective_on_some_ranks_is_stuck_until_interrupted_then_restart(
    tmp_path, sigint_raises_keyboard_interrupt
):
    """The documented rule: a collective in a cell run on some ranks waits for the others forever;
    the stop button then cannot reach it, the group is reported broken, and restart() recovers."""
    with Ranks(2, quiet=True) as group:
        timer = threading.Timer(2.0, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        with pytest.raises(CellInterrupted) as caught:
            group.run(COLLECTIVE, ranks=[0])
        timer.join()
        assert caught.value.stuck == [0]
        with pytest.raises(RanksBroken, match="rank 0 did not stop") as broken:
            group.run("1")
        assert "%ranks restart" in str(broken.value)
        group.restart()
        assert group.run(COLLECTIVE) == [3.0, 3.0]


def test_a_rank_that_dies_breaks_the_group_and_restart_recovers():
    with Ranks(2, quiet=True) as group:
        pids = group.run("import os\nos.getpid()")
        with pytest.raises(RanksBroken, match=r"rank 1 exited \(exit code 3\)"):
            group.run("import os, torch.distributed as dist\nif dist.get_rank() == 1:\n    os._exit(3)\n")
        with pytest.raises(RanksBroken, match="restart"):
            group.run("1")  # refused until restart: rank 0 cannot run collectives with a dead peer
        assert "dead (exit code 3)" in group.status()
        group.restart()
        assert group.run(COLLECTIVE) == [3.0, 3.0]
        assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie" for pid in pids)


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_stop_leaves_no_process_port_or_fd():
    Ranks(1, quiet=True).stop()  # first use imports and caches what it needs (their fds are not ours)
    before = _fds()
    group = Ranks(2, quiet=True)
    pids = group.run("import os\nos.getpid()")
    port = group._group.plan.specs[0].env["MASTER_PORT"]
    assert not port_is_free(int(port))  # the rendezvous store listens while the group lives
    for _ in range(20):
        group.run("print('a cell')")
    group.stop()
    group.stop()  # twice is fine
    assert not any(psutil.pid_exists(pid) for pid in pids)
    assert port_is_free(int(port))
    assert _fds() <= before, f"fds left open: {sorted(_fds() - before)}"
    with pytest.raises(Exception, match="stopped"):
        group.run("1")


def test_a_config_file_and_arguments_as_in_notebook_launch(tmp_path):
    path = tmp_path / "config.yaml"
    save_config(LaunchConfig(mixed_precision="fp16", gradient_accumulation_steps=4), path)
    with Ranks(2, quiet=True, config=str(path), gradient_accumulation_steps=3) as group:
        values = group.run(
            "from notebook_launcher import Accelerator\na = Accelerator()\n(a.mixed_precision, a.gradient_accumulation_steps)"
        )
    assert values == [("fp16", 3), ("fp16", 3)]  # the file's precision, the argument's accumulation
    with pytest.raises(ConfigError, match="mixed_precision"):
        Ranks(2, quiet=True, mixed_precision="fp17")
    with pytest.raises(ConfigError, match="this machine only"):
        Ranks(2, quiet=True, num_machines=2, main_process_ip="127.0.0.1")


def test_a_rank_that_cannot_start_says_why_and_leaves_nothing(monkeypatch):
    import notebook_launcher.runtime.world.state as state

    def refuse(*args, **kwargs):
        raise RuntimeError("no process group for you")

    monkeypatch.setattr(state, "get_state", refuse)  # forked ranks inherit it
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(RanksStartError) as caught:
        Ranks(2, quiet=True, start_method="fork")
    assert "no process group for you" in "\n".join(caught.value._render_traceback_())
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before


@pytest.mark.slow
def test_spawned_ranks():
    with Ranks(2, quiet=True, start_method="spawn") as group:
        assert group.start_method == "spawn"
        assert group.run(COLLECTIVE) == [3.0, 3.0]
        assert group.run(lambda: __import__("os").getpid() != os.getppid()) == [True, True]


@pytest.mark.slow
def test_ranks_from_the_warm_pool_take_the_kernels_current_state(monkeypatch):
    """What `auto` uses in a kernel that holds CUDA: ranks forked by the warm pool's server, which
    was started earlier — they still see the kernel's environment as it is when they start."""
    from notebook_launcher.launch.warm.pool import warm_pool

    warm_pool().ensure_server()
    monkeypatch.setenv("RANKS_FLAG", "set after the server started")
    with Ranks(2, quiet=True, start_method="forkserver") as group:
        assert group.run(COLLECTIVE) == [3.0, 3.0]
        assert group.run("import os\nos.environ.get('RANKS_FLAG')") == ["set after the server started"] * 2


def test_printed_output_is_streamed_per_rank_and_ends_with_its_cell(capfd):
    with Ranks(2, show_ranks=None) as group:
        group.run_cell("import torch.distributed as dist\nprint('hello from', dist.get_rank())\n40 + 2")
        out = capfd.readouterr().out
        # A line without its newline (a print cut by the stop button ends like this) belongs to its
        # own cell, not to the first line of the next one.
        group.run_cell("import sys\n_ = sys.stdout.write('no newline yet')")
        partial = capfd.readouterr().out
        group.run_cell("print('next cell')")
        following = capfd.readouterr().out
    assert "[rank0] hello from 0" in out and "[rank1] hello from 1" in out
    assert "[rank0] 42" in out and "[rank1] 42" in out  # the last expression's repr, as IPython shows it
    assert "[rank0] no newline yet" in partial and "[rank1] no newline yet" in partial, partial
    assert "[rank0] next cell" in following and "no newline yet" not in following, following


def test_the_magic_arguments():
    from IPython.core.error import UsageError

    from notebook_launcher.interactive.magic import parse_rank_list, parse_start

    panel_like = type("Panel", (), {"config": LaunchConfig(mixed_precision="bf16")})()
    assert parse_start(["2", "--mixed-precision", "bf16", "--quiet"], {}) == {
        "num_processes": 2,
        "mixed_precision": "bf16",
        "quiet": True,
    }
    assert parse_start(["--config", "panel"], {"panel": panel_like})["config"].mixed_precision == "bf16"
    assert parse_start(["--config_file", "x.yaml"], {}) == {"config": "x.yaml"}
    assert parse_start(["--fsdp_config", "{'fsdp_offload_params': True}"], {})["fsdp_config"] == {
        "fsdp_offload_params": True
    }
    assert parse_rank_list("") is None and parse_rank_list("all") is None
    assert parse_rank_list("0,2") == [0, 2]
    with pytest.raises(UsageError, match="mixed_precision"):
        parse_start(["--mixed_precison", "bf16"], {})
    with pytest.raises(UsageError, match="rank list"):
        parse_rank_list("first")
