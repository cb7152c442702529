"""A process group that never forms on one machine: the launcher starts the ranks once more instead
of hanging the cell for the collective timeout (launch/supervise/rendezvous_watch.py).

The stall is real: rank 1's gloo process group constructor never returns, so rank 0 waits in gloo's
own full-mesh connect for a peer that never comes, as both ranks did in the stall seen on a busy
2-core machine.
"""

from __future__ import annotations

import os
import time

import psutil
import pytest
from live_processes import live_children

from notebook_launcher import notebook_launch
from notebook_launcher.errors import ConfigError
from notebook_launcher.launch.result import RendezvousStalled
from notebook_launcher.launch.supervise.rendezvous_watch import (
    ENV,
    RendezvousWatch,
    all_waiting_since,
    stall_seconds,
)
from notebook_launcher.launch.supervise.stacks import MAX_WAIT_SECONDS
from notebook_launcher.launch.supervise.supervisor import GRACE_SECONDS
from notebook_launcher.records.activity import IDLE, RENDEZVOUS, Activity

STALL = 3.0  # seconds every rank waits together before the launcher gives up on that start


def rank_one_stalls_in_the_rendezvous(folder, every_time):
    """Rank 1's process group never forms in the first start (or in every start)."""
    import torch.distributed.distributed_c10d as c10d

    from notebook_launcher import Accelerator

    marker = os.path.join(folder, "stalled")
    if os.environ["RANK"] == "1" and (every_time or not os.path.exists(marker)):
        open(marker, "a").close()

        def never_returns(*args, **kwargs):
            time.sleep(3600)

        c10d.ProcessGroupGloo = never_returns
    acc = Accelerator()
    import torch

    total = acc.reduce(torch.tensor([acc.process_index + 1.0]), "sum")
    return {"total": total.item(), "restart_count": acc.restart_count}


def rank_one_arrives_late(seconds):
    """Rank 1 reaches Accelerator() only after `seconds` of its own work: rank 0 waits alone."""
    from notebook_launcher import Accelerator

    if os.environ["RANK"] == "1":
        time.sleep(seconds)
    acc = Accelerator()
    acc.wait_for_everyone()
    return acc.process_index


def _clean_start_seconds() -> float:
    """The floor for a stalled launch's time: a launch whose group forms at once, timed here."""
    began = time.monotonic()
    notebook_launch(rank_one_arrives_late, args=(0.0,), num_processes=2, quiet=True)
    return time.monotonic() - began


def _one_stalled_start(clean: float) -> float:
    """The most one stalled start may take: the wait itself, the stack dumps, the SIGKILL after the
    grace (rank 0 is stuck in gloo's C code), and a few times a clean launch for the rest."""
    return STALL + MAX_WAIT_SECONDS + GRACE_SECONDS + 3 * clean


def _children() -> list[psutil.Process]:
    return live_children()


def test_a_start_whose_process_group_never_forms_is_started_again(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv(ENV, str(STALL))
    clean = _clean_start_seconds()
    capfd.readouterr()
    began = time.monotonic()
    with pytest.warns(RuntimeWarning, match="start once more"):  # said even with quiet=True
        result = notebook_launch(
            rank_one_stalls_in_the_rendezvous, args=(str(tmp_path), False), num_processes=2, timeout=60
        )
    took = time.monotonic() - began
    assert [result[rank]["total"] for rank in range(2)] == [3.0, 3.0]  # the second start formed the group
    assert result.restarts == 0 and [result[rank]["restart_count"] for rank in range(2)] == [0, 0]
    # counted in the result, with where each rank waited
    assert [type(failure) for failure in result.failures] == [RendezvousStalled]
    assert "never_returns" in result.failures[0].stacks[1]
    err = capfd.readouterr().err
    assert "started again: every rank waited in the rendezvous (init_process_group)" in err
    # the wait, the stack dumps and the stop of a rank stuck in C code (SIGKILL after the grace)
    assert STALL < took < _one_stalled_start(clean) + 3 * clean, (took, clean)  # and one good start
    assert _children() == []


def test_a_start_that_stalls_again_raises_with_where_each_rank_waited(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, str(STALL))
    clean = _clean_start_seconds()
    began = time.monotonic()
    with pytest.raises(RendezvousStalled) as info, pytest.warns(RuntimeWarning, match="start once more"):
        notebook_launch(
            rank_one_stalls_in_the_rendezvous,
            args=(str(tmp_path), True),
            num_processes=2,
            quiet=True,
            timeout=60,
        )
    took = time.monotonic() - began
    error = info.value
    assert error.attempts == 2 and error.seconds == STALL
    assert "in each of 2 starts" in str(error) and "init_process_group" in str(error)
    assert error.report is not None and error.report.kind == "rendezvous"
    assert "never_returns" in error.stacks[1]  # rank 1's stack shows where it hung
    assert 2 * STALL < took < 2 * _one_stalled_start(clean), (took, clean)
    assert _children() == []


def test_a_rank_still_busy_before_its_rendezvous_is_not_a_stall(monkeypatch, capfd):
    monkeypatch.setenv(ENV, "2")  # rank 0 waits twice that long alone; a rendezvous itself takes ms
    result = notebook_launch(rank_one_arrives_late, args=(4.0,), num_processes=2)
    assert [result[rank] for rank in range(2)] == [0, 1]
    assert "started again" not in capfd.readouterr().err


def test_the_wait_is_set_by_the_environment(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert stall_seconds() == 60.0
    monkeypatch.setenv(ENV, "0")
    assert stall_seconds() is None and RendezvousWatch(all_ranks_local=True).seconds is None
    monkeypatch.setenv(ENV, "soon")
    with pytest.raises(ConfigError, match=f"{ENV}='soon' is not a number of seconds"):
        stall_seconds()
    monkeypatch.setenv(ENV, "5")
    assert RendezvousWatch(all_ranks_local=False).seconds is None  # ranks on other machines may be late


def test_only_every_rank_inside_the_rendezvous_counts():
    inside = Activity(RENDEZVOUS, 0, "init_process_group", 100.0)
    later = Activity(RENDEZVOUS, 0, "init_process_group", 130.0)
    past = Activity(IDLE, 1, "barrier", 120.0)
    assert all_waiting_since({0: inside, 1: later}) == 130.0  # since the last one arrived
    assert all_waiting_since({0: inside, 1: past}) is None
    assert all_waiting_since({0: inside, 1: None}) is None  # rank 1 has not started our code yet
    assert all_waiting_since({}) is None
