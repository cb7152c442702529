"""Launches without a tail (issue 38): relaunch after relaunch, none waits seconds for nothing.

The tail was a reverse DNS lookup: every connection torch's TCPStore makes formats the peer address
with getnameinfo, and ::ffff:127.0.0.1 is in no /etc/hosts, so the query goes to the DNS server. On
a machine whose server drops a query now and then (here: one in fifty of a burst), that rank waited
the resolver's 5 s; one relaunch in twenty took 5.07 s. The ranks of a one-machine launch now meet
in a file (system/store.py), and the TCP store is hosted only for code that asks for it.
"""

from __future__ import annotations

import statistics
import time

from notebook_launcher import notebook_launch

RELAUNCHES = 80  # back to back: about 400 lookups in a few seconds before the fix


def barrier_and_store() -> tuple[int, str, int]:
    """This rank's index, its group's store's type, and the size of the launch's rendezvous file."""
    import os

    import torch.distributed as dist

    from notebook_launcher import Accelerator
    from notebook_launcher.records.names import RUN_DIR_ENV

    acc = Accelerator()
    acc.wait_for_everyone()
    store = dist.distributed_c10d._get_default_store()
    while hasattr(store, "underlying_store"):
        store = store.underlying_store
    written = os.path.getsize(os.path.join(os.environ[RUN_DIR_ENV], "rendezvous.attempt0"))
    return acc.process_index, type(store).__name__, written


def own_process_group() -> int:
    """User code that forms the group itself (env://), as plain torch does."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    total = torch.tensor([dist.get_rank() + 1.0])
    dist.all_reduce(total)
    dist.destroy_process_group()
    return int(total.item())


def test_the_ranks_of_a_one_machine_launch_meet_without_tcp():
    result = notebook_launch(barrier_and_store, num_processes=2, quiet=True, timeout=120)
    assert [rank for rank, _, _ in result] == [0, 1]
    assert all(kind != "TCPStore" for _, kind, _ in result), result
    assert all(written > 0 for _, _, written in result), "the group's keys are not in the rendezvous file"


def test_a_rank_that_forms_its_own_group_finds_the_launchers_store():
    result = notebook_launch(own_process_group, num_processes=2, quiet=True, timeout=120)
    assert list(result) == [3, 3]


def test_no_relaunch_waits_seconds_for_nothing():
    """The worst of many relaunches against their median, from the call: a 5 s wait stands out."""
    notebook_launch(barrier_and_store, num_processes=2, quiet=True)  # one-time imports
    times = []
    for _ in range(RELAUNCHES):
        began = time.monotonic()
        notebook_launch(barrier_and_store, num_processes=2, quiet=True, timeout=120)
        times.append(time.monotonic() - began)
    median, worst = statistics.median(times), max(times)
    slow = sorted(round(t, 2) for t in times if t > 10 * median)
    assert worst < 20 * median, f"median {median:.3f}s, worst {worst:.2f}s; over 10x the median: {slow}"
