"""A launched worker trains as fast as a plain forked process (issue 25).

The same raw DDP code (benchmarks/step_overhead.py: a 2M-parameter MLP, batch 32, 2 ranks, one
thread each) is started by a plain `torch.multiprocessing` fork and by `notebook_launch`,
alternating, three times each. Compared: rank 0's CPU time per step (user + system, every thread
of the process), which other processes' load moves far less than wall time — the cost we
removed (page faults for every large tensor) was CPU time in the worker. The bound is 10 % plus
the noise measured here: the spread between the two best runs of each way.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from step_overhead import launched, plain_fork  # noqa: E402

pytestmark = pytest.mark.slow

MODEL, RANKS, STEPS, ROUNDS = "MLP 2M", 2, 60, 3


def _spread(values: list[float]) -> float:
    best, second = sorted(values)[:2]
    return (second - best) / best


def test_a_launched_worker_costs_no_more_cpu_per_step_than_a_plain_fork():
    plain, ours = [], []
    for _ in range(ROUNDS):
        plain.append(plain_fork(MODEL, RANKS, STEPS)[1])
        ours.append(launched(MODEL, RANKS, STEPS)[1])
    noise = max(_spread(plain), _spread(ours))
    ratio = min(ours) / min(plain)
    assert ratio <= 1.10 + noise, (
        f"a launched worker used {ratio:.3f}x the CPU per step of a plain fork (bound {1.10 + noise:.3f}: "
        f"10 % + noise {noise:.3f}); CPU ms/step plain {plain}, launched {ours}"
    )
