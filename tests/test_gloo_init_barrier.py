"""No rank leaves the process group's initialisation before every rank has finished its own.

torch's init_process_group returns on a rank once its gloo pairs are made from its side; the other
side may still be accepting them. A rank that then returned and exited closed its sockets under its
peer, which failed with "Gloo connectFullMesh failed ... Connection closed by peer" (raw torch: 37
launches of 1,200 on a loaded machine, benchmarks/concurrent_launches.py). Here rank 0 finishes its
initialisation a second late; rank 1 must not be back from its own before that.
"""

from __future__ import annotations

import time

from notebook_launcher import Accelerator, notebook_launch

LATE_SECONDS = 1.0


def _rank_times() -> tuple[int, float | None, float]:
    """(rank, when rank 0's init_process_group returned, when Accelerator() returned), monotonic
    clock (one clock for every process on the machine)."""
    import torch.distributed as dist

    real_init = dist.init_process_group
    finished: list[float] = []

    def init_late(*args, **kwargs):  # rank 0's pairs are up; it only returns late
        real_init(*args, **kwargs)
        if dist.get_rank() == 0:
            time.sleep(LATE_SECONDS)
            finished.append(time.monotonic())

    dist.init_process_group = init_late
    try:
        accelerator = Accelerator(cpu=True)
    finally:
        dist.init_process_group = real_init
    return accelerator.process_index, (finished[0] if finished else None), time.monotonic()


def test_no_rank_is_back_from_initialising_before_every_rank_is_done() -> None:
    results = notebook_launch(_rank_times, num_processes=2, start_method="fork", quiet=True)
    (_, rank0_done, _), (rank, _, rank1_back) = results
    assert rank == 1 and rank0_done is not None
    assert rank1_back >= rank0_done, (
        f"rank 1 was back from initialising {rank0_done - rank1_back:.3f} s before rank 0 had finished"
    )
