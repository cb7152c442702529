"""Runs that survive: restarts with exact resume (max_restarts) and graceful preemption (SIGTERM /
SIGUSR1), on 2 CPU processes with real kills and real signals.

Exactness: a resumed run must end with the very weights of an uninterrupted one. Both runs do the
same float operations in the same order on the same machine (the checkpoint restores weights,
momentum, scheduler, RNG states and the loader's position bit for bit), so the comparison is
torch.equal; no tolerance is needed, and any inexact resume (a lost momentum buffer, a reshuffled
epoch, a dropout mask drawn from another RNG state) changes the weights far above rounding.
"""

from __future__ import annotations

import os
import re
import signal

import psutil
import pytest
import torch
from restart_trainers import train

from notebook_launcher import LaunchPreempted, WorkerError, notebook_launch
from notebook_launcher.errors import ConfigError

EVERY = 4  # save_state() every 4 steps; 24 steps of 2 ranks x 5 batches per epoch


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run's weights."""
    result = notebook_launch(train, args=(str(tmp_path_factory.mktemp("ref")),), num_processes=2, quiet=True)
    assert result[0]["resumed_at"] == 0 and result.restarts == 0 and result.failures == []
    return result[0]["weights"]


def listening_ports() -> set[int]:
    me = psutil.Process()
    return {c.laddr.port for c in me.net_connections("inet") if c.status == psutil.CONN_LISTEN}


def assert_same_weights(weights, reference):
    assert weights.keys() == reference.keys()
    for key in reference:
        assert torch.equal(weights[key], reference[key]), f"{key} differs from the uninterrupted run"


# ------------------------------------------------------------------------------------ restarts
@pytest.mark.parametrize("kill_how, kill_at", [("SIGKILL", 10), ("exit", 17)])
def test_a_killed_rank_is_restarted_and_resumes_exactly(tmp_path, reference, capsys, kill_how, kill_at):
    ports = listening_ports()
    result = notebook_launch(
        train,
        args=(str(tmp_path),),
        kwargs=dict(kill_rank=1, kill_at=kill_at, kill_how=kill_how),
        num_processes=2,
        max_restarts=2,
    )
    assert result.restarts == 1
    (failure,) = result.failures
    assert isinstance(failure, WorkerError) and failure.rank == 1
    assert [value["restart_count"] for value in result] == [1, 1]
    resumed = kill_at // EVERY * EVERY  # the last checkpoint saved before the kill
    assert [value["resumed_at"] for value in result] == [resumed, resumed]
    for value in result:
        assert_same_weights(value["weights"], reference)
    what = (
        "was killed (SIGKILL)" if kill_how == "SIGKILL" else "exited with code 3 without a Python exception"
    )
    said = capsys.readouterr().err
    # "at epoch E step S": the rank's last progress report (its prepared loader reports a few per second)
    assert re.search(f"restart 1/2: rank 1 {re.escape(what)} at epoch [0-9] step [0-9]", said), said
    assert f"resuming from checkpoint_{resumed // EVERY - 1}" in said
    assert listening_ports() <= ports  # the stores of both attempts are closed
    # (no process left: the autouse fixture in conftest.py checks every test)


def test_start_launch_restarts_too(tmp_path, reference):
    from notebook_launcher import start_launch

    handle = start_launch(
        train,
        args=(str(tmp_path),),
        kwargs=dict(kill_rank=0, kill_at=7),
        num_processes=2,
        max_restarts=1,
        quiet=True,
    )
    result = handle.wait(120)
    assert result.restarts == 1 and result.failures[0].rank == 0
    assert_same_weights(result[1]["weights"], reference)


def test_a_python_exception_is_not_restarted_unless_asked(tmp_path, reference):
    kwargs = dict(kill_rank=1, kill_at=6, kill_how="raise")
    with pytest.raises(WorkerError) as error:
        notebook_launch(
            train, args=(str(tmp_path / "a"),), kwargs=kwargs, num_processes=2, max_restarts=2, quiet=True
        )
    assert error.value.exc_type == "ValueError"
    assert "did not restart: rank 1 raised ValueError in your code" in str(error.value)
    assert "restart_on='any'" in "".join(error.value._render_traceback_())
    result = notebook_launch(
        train,
        args=(str(tmp_path / "b"),),
        kwargs=kwargs,
        num_processes=2,
        max_restarts=2,
        restart_on="any",
        quiet=True,
    )
    assert result.restarts == 1 and result.failures[0].exc_type == "ValueError"
    assert_same_weights(result[0]["weights"], reference)


def test_restarts_run_out(tmp_path):
    """A rank killed on every attempt: after max_restarts restarts the failure is raised, saying so."""

    with pytest.raises(WorkerError) as error:
        notebook_launch(kill_every_time, num_processes=2, max_restarts=1, quiet=True)
    assert error.value.signal == "SIGKILL"
    assert "all 1 restart(s) (max_restarts=1) were used" in str(error.value)


def kill_every_time():
    from notebook_launcher import Accelerator

    accelerator = Accelerator()
    if accelerator.process_index == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    accelerator.wait_for_everyone()


@pytest.mark.parametrize("kill_at", [4, 8])
def test_a_kill_during_save_state_keeps_the_last_complete_checkpoint(tmp_path, reference, kill_at):
    """total_limit=1: rank 1 dies while checkpoint_1 (or the first, checkpoint_0) is being written;
    checkpoint_0 must survive (rotation happens only after the new one is complete) and the restart
    resumes from it; the half-written folder is not in checkpoints/ (the resume checks its listing)."""
    result = notebook_launch(
        train,
        args=(str(tmp_path),),
        kwargs=dict(kill_rank=1, kill_at=kill_at, kill_how="in_save", total_limit=1),
        num_processes=2,
        max_restarts=1,
        quiet=True,
    )
    assert result.restarts == 1
    assert [value["resumed_at"] for value in result] == [kill_at - 4] * 2
    assert_same_weights(result[1]["weights"], reference)
    left = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert left == ["checkpoint_5"]  # 24 steps / 4 = 6 saves, total_limit=1


def test_restart_settings_are_checked():
    with pytest.raises(ConfigError, match="restart_on='sometimes' is not valid"):
        notebook_launch(train, args=("x",), num_processes=2, restart_on="sometimes")
    with pytest.raises(ConfigError, match="restarts the workers of one machine only"):
        notebook_launch(
            train, args=("x",), num_processes=2, num_nodes=2, master_addr="127.0.0.1", max_restarts=1
        )


# ---------------------------------------------------------------------------------- preemption
@pytest.mark.parametrize("to, signame", [("launcher", "SIGTERM"), ("worker", "SIGUSR1")])
def test_preemption_stops_every_rank_at_the_same_step_and_resumes_exactly(tmp_path, reference, to, signame):
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1)}
    preempt = dict(rank=1, at=6, to=to, signal=signame)
    with pytest.raises(LaunchPreempted) as stopped:
        notebook_launch(
            train, args=(str(tmp_path),), kwargs=dict(preempt=preempt), num_processes=2, quiet=True
        )
    assert {s: signal.getsignal(s) for s in handlers} == handlers  # the caller is left as it was
    error = stopped.value
    assert error.signal == signame and error.checkpoint is not None
    assert ("the launcher" if to == "launcher" else "rank 1") in str(error)
    # Every rank stopped after the same step and saved the same complete checkpoint.
    assert len({value["preempted_at"] for value in error.values.values()}) == 1
    assert {value["saved"] for value in error.values.values()} == {error.checkpoint}
    assert os.path.isdir(error.checkpoint)
    # The next launch resumes from it and ends where the uninterrupted run ended.
    result = notebook_launch(train, args=(str(tmp_path),), num_processes=2, quiet=True)
    assert result[0]["resumed_at"] == error.values[0]["preempted_at"]
    assert_same_weights(result[0]["weights"], reference)


def test_the_ranks_agree_about_once_a_second_not_at_every_step(tmp_path):
    """The agreement is a collective: at every step it would cost every run. With the default cadence
    (~1 s) and ~20 ms steps, rank 0 spaces the checks ~50 steps apart and hands the spacing to every
    rank; a request still stops every rank after the same step, soon after the signal."""
    preempt = dict(rank=1, at=30, to="worker", signal="SIGUSR1", check_seconds=1.0)
    with pytest.raises(LaunchPreempted) as stopped:
        notebook_launch(
            train,
            args=(str(tmp_path),),
            kwargs=dict(preempt=preempt, total_steps=2000, every=10_000, sleep=0.02),
            num_processes=2,
            quiet=True,
        )
    values = stopped.value.values
    steps = {value["preempted_at"] for value in values.values()}
    assert len(steps) == 1  # the same step on every rank
    (step,) = steps
    checks = {value["agreement_checks"] for value in values.values()}
    assert len(checks) == 1  # every rank met in the same all_reduces
    # Far fewer checks than steps (one per step would be `step`), and the stop came within a few
    # seconds' worth of steps of the signal however slow this machine is (the spacing is measured).
    assert next(iter(checks)) < step / 5, (checks, step)
    assert 30 < step < 2000


def test_a_preempted_worker_is_restarted_when_max_restarts_allows(tmp_path, reference):
    preempt = dict(rank=1, at=9, to="worker", signal="SIGTERM")
    result = notebook_launch(
        train,
        args=(str(tmp_path),),
        kwargs=dict(preempt=preempt),
        num_processes=2,
        max_restarts=1,
        quiet=True,
    )
    assert result.restarts == 1 and isinstance(result.failures[0], LaunchPreempted)
    assert [value["resumed_at"] for value in result] == [10, 10]
    assert_same_weights(result[0]["weights"], reference)


def terminate_self_without_accelerator():
    import torch.distributed as dist

    if int(os.environ["RANK"]) == 1:
        os.kill(os.getpid(), signal.SIGTERM)
    dist.init_process_group("gloo")
    dist.barrier()


def test_sigterm_still_ends_a_worker_that_has_no_accelerator():
    """Without an Accelerator nothing would check accelerator.preempted: SIGTERM keeps its meaning."""
    with pytest.raises(WorkerError) as error:
        notebook_launch(terminate_self_without_accelerator, num_processes=2, quiet=True)
    assert error.value.rank == 1 and error.value.signal == "SIGTERM"


# ------------------------------------------------------------------------------------------- CLI
CLI_SCRIPT = """
import os, sys, torch
sys.path.insert(0, {tests!r})
from restart_trainers import train
out = train({project!r}, kill_rank=1, kill_at=10)
if os.environ["RANK"] == "0":
    torch.save(out, {target!r})
"""


@pytest.mark.slow  # ~35 s: torchrun starts the workers twice
def test_the_cli_restarts_through_torchrun_with_the_same_resume(tmp_path, reference):
    from test_cli_helpers import explain, run_cli

    target = tmp_path / "out.pt"
    script = CLI_SCRIPT.format(
        tests=os.path.dirname(__file__), project=str(tmp_path / "project"), target=str(target)
    )
    (tmp_path / "train.py").write_text(script)
    result = run_cli(
        ["launch", "--num_processes", "2", "--max_restarts", "1", "train.py"], cwd=tmp_path, timeout=120
    )
    assert result.returncode == 0, explain(result)
    out = torch.load(target, weights_only=False)
    assert out["restart_count"] == 1 and out["resumed_at"] == 8, explain(result)
    assert_same_weights(out["weights"], reference)


# ---------------------------------------------------------------------------------- panel, view
def test_the_run_view_and_the_panel_know_restarts():
    from notebook_launcher import ConfigPanel
    from notebook_launcher.config import LaunchConfig
    from notebook_launcher.launch.events import RunFinished, RunRestarting, RunStarted
    from notebook_launcher.widgets.view.run_state import RunState

    state = RunState()
    state.apply(RunStarted(2, (0, 1), "fork", None))
    state.apply(RunFinished("failed", 1.0, 1, "rank 1 was killed by SIGKILL"))
    state.apply(
        RunRestarting(1, 2, "rank 1 was killed (SIGKILL) at epoch 1 step 2", "/p/checkpoints/checkpoint_3")
    )
    said = "restart 1/2: rank 1 was killed (SIGKILL) at epoch 1 step 2, resuming from checkpoint_3"
    assert said in state.status_text()  # running again, not "failed"
    assert any(said in text for _, text in state.lines[1])
    panel = ConfigPanel(config=LaunchConfig(max_restarts=2, num_processes=2))
    assert panel.restarts.widget.value == 2
    panel.restarts.widget.value = 3
    assert panel.config.max_restarts == 3


# ---------------------------------------------------------------------------------- in a kernel
@pytest.mark.slow  # ~15-20 s: a kernel and three launches
def test_in_a_notebook_the_cell_says_restart_and_preempted(kernel, tmp_path):
    """A real kernel: the restart line in the cell, and SIGTERM to the kernel itself during a launch
    is a preemption (LaunchPreempted shown as one line) that leaves the kernel running."""
    tests = os.path.dirname(__file__)
    kernel.run(
        f"import sys; sys.path.insert(0, {tests!r})\nfrom restart_trainers import train\nfrom notebook_launcher import notebook_launch"
    )
    run = kernel.run(
        f"r = notebook_launch(train, args=({str(tmp_path / 'a')!r},), kwargs=dict(kill_rank=1, kill_at=6), "
        "num_processes=2, max_restarts=1)\nprint('restarts', r.restarts)",
        timeout=120,
    )
    said = r"notebook_launch: restart 1/1: rank 1 was killed \(SIGKILL\) at epoch \d step \d, resuming from checkpoint_0"
    assert re.search(said, run.stderr) and "restarts 1" in run.stdout, run.text
    preempt = dict(rank=0, at=5, to="launcher", signal="SIGTERM")
    run = kernel.run(
        f"notebook_launch(train, args=({str(tmp_path / 'b')!r},), kwargs=dict(preempt={preempt!r}), num_processes=2)"
    )
    assert run.error is not None and run.error["ename"] == "LaunchPreempted", run.text
    shown = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(run.error["traceback"]))
    assert shown.startswith(
        "LaunchPreempted: the run was preempted (SIGTERM to the launcher); last checkpoint: "
    ), shown
    assert kernel.value("1 + 1") == 2  # the kernel is still there, its SIGTERM handler back
