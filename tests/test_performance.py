"""Why is my run slow: each rank's step breakdown and the straggler verdict, from real DDP runs.

The ranks' extra time is a sleep (in `__getitem__` for slow data, in forward for slow compute): the
verdicts must not depend on how busy the machine running the tests is, and a sleep costs the same
wall time on a loaded machine as on an idle one, which a matmul does not. The collectives' own time
does stretch with load, for every rank alike; so the straggler's extra time (STRAGGLE, 100 ms a step)
stays a large share of a step until the all-reduce takes half a second, as it does at several times
the load CI put on it (99 ms steps there, 50 ms of them in the all-reduce).
"""

from __future__ import annotations

import time

import pytest

from notebook_launcher import notebook_launch
from notebook_launcher.estimate.performance import (
    SAY_MIN_SECONDS,
    SAY_MIN_STEPS,
    PerformanceReport,
    RankSteps,
)

STEPS = 12
STRAGGLE = 0.1  # seconds per step that the slow rank adds


class _Items:
    """A dataset whose items take `delay` seconds on the slow rank."""

    def __init__(self, slow_rank: int | None, delay: float, steps: int = STEPS) -> None:
        self.slow_rank, self.delay, self.steps = slow_rank, delay, steps

    def __len__(self) -> int:
        return 4 * 2 * self.steps

    def __getitem__(self, index: int):
        import os

        import torch

        if int(os.environ.get("RANK", "0")) == self.slow_rank:
            time.sleep(self.delay)
        return torch.full((8,), float(index % 7)), torch.tensor([1.0])


def _train(slow_data_rank=None, slow_compute_rank=None, forward_sleep=0.01, steps=STEPS, straggle=STRAGGLE):
    import torch
    from torch.utils.data import DataLoader

    from notebook_launcher import Accelerator

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)

        def forward(self, x):
            rank = int(__import__("os").environ["RANK"])
            # stands in for compute
            time.sleep(forward_sleep + (straggle if rank == slow_compute_rank else 0))
            return self.layer(x)

    accelerator = Accelerator()
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(_Items(slow_data_rank, straggle / 4, steps), batch_size=4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    return True


def _report(capsys=None, **kwargs) -> PerformanceReport:
    result = notebook_launch(_train, kwargs=kwargs, num_processes=2, quiet=True)
    report = result.performance
    assert [r.rank for r in report.ranks] == [0, 1]
    assert all(r.steps == STEPS - 1 for r in report.ranks)  # the first step is warm-up
    return report


def test_a_rank_with_slow_data_is_named_with_data():
    report = _report(slow_data_rank=1)
    assert report.kind == "data straggler", str(report)
    assert report.straggler == 1
    assert "rank 1 is the straggler: its data loading takes" in report.verdict
    assert report.ranks[1].data_ms > 1000 * STRAGGLE * 0.9  # 4 items x 25 ms
    assert report.ranks[0].share("wait") > 0.3  # rank 0 waits for it in DDP's all-reduce


def test_a_rank_with_extra_compute_is_named_with_compute():
    report = _report(slow_compute_rank=1)
    assert report.kind == "compute straggler", str(report)
    assert report.straggler == 1 and "its compute takes" in report.verdict


def test_a_balanced_run_gets_no_warning_and_its_parts_add_up(capsys):
    # steps of ~400 ms: the all-reduce's own time, which a loaded machine stretches, stays a small share
    # (with 100 ms steps, one run beside four busy test workers measured 35-37% in collectives: 60 ms)
    result = notebook_launch(_train, kwargs={"forward_sleep": 0.4}, num_processes=2)
    printed = capsys.readouterr().out
    assert result.performance.kind == "balanced", str(result.performance)
    assert "straggler" not in printed and "bound" not in printed
    for rank in result.performance.ranks:  # data + compute + wait is the step, within 10 %
        parts = rank.data_ms + rank.compute_ms + rank.wait_ms
        assert abs(parts - rank.step_ms) <= 0.1 * rank.step_ms, rank


def test_the_verdict_is_printed_once_when_something_is_off_in_a_run_long_enough(capsys):
    # 55 measured steps of over 110 ms (rank 0's 100 ms of data on top of 10 ms of "compute"): past
    # SAY_MIN_STEPS and SAY_MIN_SECONDS
    kwargs = {"slow_data_rank": 0, "steps": SAY_MIN_STEPS + 6}
    result = notebook_launch(_train, kwargs=kwargs, num_processes=2)
    printed = capsys.readouterr().out
    assert result.performance.worth_saying, str(result.performance)
    assert printed.count("notebook_launch: rank 0 is the straggler") == 1


def test_a_short_run_keeps_its_verdict_to_itself(capsys):
    result = notebook_launch(_train, kwargs={"slow_data_rank": 0}, num_processes=2)  # 11 steps of ~110 ms
    printed = capsys.readouterr().out
    assert result.performance.kind == "data straggler", str(result.performance)  # still measured and kept
    assert not result.performance.worth_saying
    assert "straggler" not in printed and "notebook_launch: rank" not in printed


@pytest.mark.parametrize(
    "steps, step_ms, said",
    [
        (SAY_MIN_STEPS, 1000 * SAY_MIN_SECONDS / SAY_MIN_STEPS, True),  # both limits exactly
        (SAY_MIN_STEPS - 1, 1000.0, False),  # long steps, too few of them
        (47, 3.0, False),  # the quick start: 48 steps of a few ms, the first one warm-up
        (10_000, 0.4, False),  # many steps, under 5 s in all
    ],
)
def test_the_verdict_is_said_only_for_runs_long_enough(steps, step_ms, said):
    communication_bound = [  # every rank waits 40 % of each step, nobody late
        RankSteps(rank, steps, step_ms, 0.05 * step_ms, 0.55 * step_ms, 0.4 * step_ms) for rank in (0, 1)
    ]
    report = PerformanceReport(communication_bound)
    assert report.kind == "communication-bound"
    assert report.worth_saying == said
    assert not PerformanceReport([RankSteps(r, 10_000, 100.0, 5, 90, 5) for r in (0, 1)]).worth_saying


_SCRIPT = """
import time
import torch
from torch.utils.data import DataLoader, TensorDataset
from notebook_launcher import Accelerator

accelerator = Accelerator()
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = TensorDataset(torch.randn(96, 8), torch.randn(96, 1))
model, optimizer, loader = accelerator.prepare(model, optimizer, DataLoader(data, batch_size=4))
for x, y in loader:
    if accelerator.process_index == 1:
        time.sleep(0.03)  # the loop's own code, slower on rank 1
    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
    optimizer.step()
    optimizer.zero_grad()
"""


def test_the_cli_prints_the_breakdown_with_report_performance(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text(_SCRIPT)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "notebook_launcher",
            "launch",
            "--num_processes",
            "2",
            "--report_performance",
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "notebook-launcher: rank 1 is the straggler: its own code" in done.stderr
    assert "rank  steps  step ms" in done.stderr
    assert not list(tmp_path.iterdir())[1:], "nothing but the script is left behind"


def _rank(rank, step, data, compute, wait):
    return RankSteps(rank, 10, step, data, compute, wait)


@pytest.mark.parametrize(
    "ranks, kind",
    [
        ([_rank(0, 100, 5, 90, 5), _rank(1, 100, 5, 88, 7)], "balanced"),
        ([_rank(0, 100, 80, 15, 5), _rank(1, 100, 75, 20, 5)], "input-bound"),
        ([_rank(0, 100, 5, 55, 40), _rank(1, 100, 5, 60, 35)], "communication-bound"),
        ([_rank(0, 100, 5, 50, 45), _rank(1, 100, 50, 48, 2)], "data straggler"),
        ([_rank(0, 100, 5, 50, 45), _rank(1, 100, 5, 93, 2)], "compute straggler"),
        ([_rank(0, 100, 5, 50, 45), _rank(1, 100, 5, 50, 2)], "code straggler"),  # 43 ms of its own code
        # CI's loaded machine: the all-reduce itself took 50 ms on both ranks, and rank 0 waited 29 ms more
        ([_rank(0, 99, 1, 19, 79), _rank(1, 99, 1, 47, 50)], "compute straggler"),
        # both wait about as long, 8 ms apart: nobody is late
        ([_rank(0, 100, 5, 45, 50), _rank(1, 100, 5, 53, 42)], "communication-bound"),
        ([], "unmeasured"),
    ],
)
def test_each_verdict_from_its_numbers(ranks, kind):
    report = PerformanceReport(ranks)
    assert report.kind == kind
    assert report.balanced == (kind in ("balanced", "unmeasured"))
