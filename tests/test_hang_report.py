"""The hang report (stall_timeout=, timeout=, RunHandle.stacks()): real hangs injected into 2 gloo
CPU processes, and the verdict must name the culprit. Every run here ends by itself (the stuck rank
wakes up) or through timeout=, so a broken detector fails an assertion instead of hanging the suite."""

from __future__ import annotations

import os
import time

import pytest
import torch
import torch.distributed as dist

from notebook_launcher import LaunchConfig, notebook_launch, start_launch
from notebook_launcher.launch.events import HangReported, OutputLine
from notebook_launcher.launch.result import LaunchTimeout
from notebook_launcher.launch.supervise.hang_report import BUSY, MISMATCH, MISSING, RENDEZVOUS

STALL = 1.0  # seconds without progress before a report; each injected hang lasts a few times this
MARK = "injecting the hang"


def _mark() -> None:
    print(MARK, flush=True)  # the last progress before the injected stall


class Reports(list):
    """Observer collecting the HangReport of every HangReported event after the injected hang began
    (MARK): on a busy machine the start-up alone can take longer than STALL, a real stall as well,
    reported too, but not the one under test. `.armed_at` is when MARK arrived."""

    def __init__(self) -> None:
        super().__init__()
        self.armed_at: float | None = None

    def __call__(self, event) -> None:
        if isinstance(event, OutputLine) and event.text == MARK:
            self.armed_at = time.monotonic()
        elif isinstance(event, HangReported) and (
            self.armed_at is not None or event.report.reason != "stall"
        ):
            self.append(event.report)


def _rank() -> int:
    from notebook_launcher import Accelerator

    return Accelerator().process_index


def skip_barrier(pause: float) -> str:
    rank = _rank()
    for _ in range(3):
        dist.all_reduce(torch.ones(1))
    if rank == 1:
        _mark()
        time.sleep(pause)  # rank 0 waits in barrier #4 meanwhile; then rank 1 joins and all ends well
    dist.barrier()
    return "done"


def test_a_rank_skipping_a_barrier_is_named_and_the_run_goes_on():
    reports = Reports()
    result = notebook_launch(
        skip_barrier, args=(4 * STALL,), num_processes=2, stall_timeout=STALL, observers=[reports], quiet=True
    )
    assert list(result) == ["done", "done"]  # reported, not stopped
    assert len(reports) == 1, [r.verdict for r in reports]  # once per stall
    report = reports[0]
    assert report.reason == "stall" and report.kind == MISSING
    assert report.verdict.startswith("rank 1 never reached barrier #4, which rank 0 has waited in for")
    assert "skip_barrier (test_hang_report.py:" in report.verdict  # where rank 1 is instead
    rank1 = report.ranks[1].stack
    assert "time.sleep(pause)" in rank1  # all threads' stacks, with source lines
    assert "dist.barrier()" in report.ranks[0].stack
    assert "in barrier #4" in report.text()


def mismatched() -> None:
    tensor = torch.ones(4)
    if _rank() == 0:
        dist.all_reduce(tensor)
    else:
        _mark()
        dist.broadcast(tensor, src=0)


def formed_group() -> None:
    _rank()  # Accelerator(): init_process_group
    dist.barrier()


def test_mismatched_collectives_are_told_apart_and_timeout_shows_the_same_report():
    # The timeout must come after the stall report: it counts from the call, so it leaves room for
    # a start-up measured here (a 2-rank launch that forms its group) as well as the stall itself.
    began = time.monotonic()
    notebook_launch(formed_group, num_processes=2, quiet=True)
    start_up = time.monotonic() - began
    reports = Reports()
    with pytest.raises(LaunchTimeout) as caught:
        notebook_launch(
            mismatched,
            num_processes=2,
            stall_timeout=STALL,
            timeout=3 * start_up + 4 * STALL,
            observers=[reports],
            quiet=True,
        )
    assert [r.reason for r in reports] == ["stall", "timeout"]
    for report in reports:
        assert report.kind == MISMATCH, report.verdict
        assert "rank 0 in all_reduce #1" in report.verdict and "rank 1 in broadcast #1" in report.verdict
    assert caught.value.report is reports[1]
    assert "Verdict: ranks are in different collectives" in caught.value.summary


class SlowOnRankOne(torch.utils.data.Dataset):
    def __init__(self, pause: float) -> None:
        self.pause = pause

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> torch.Tensor:
        if index == 5 and self.pause:  # rank 1's third batch (each rank reads every other index)
            _mark()
            time.sleep(self.pause)
        return torch.tensor([float(index)])


def loader_loop(pause: float) -> int:
    from notebook_launcher import Accelerator

    accelerator = Accelerator()
    loader = accelerator.prepare(torch.utils.data.DataLoader(SlowOnRankOne(pause), batch_size=1))
    steps = 0
    for batch in loader:
        accelerator.reduce(batch)  # one counted all_reduce per step
        steps += 1
    return steps


def test_a_rank_sleeping_in_getitem_is_named():
    reports = Reports()
    result = notebook_launch(
        loader_loop, args=(4 * STALL,), num_processes=2, stall_timeout=STALL, observers=[reports], quiet=True
    )
    assert list(result) == [4, 4]
    assert len(reports) == 1 and reports[0].kind == MISSING, [r.verdict for r in reports]
    verdict = reports[0].verdict
    assert verdict.startswith("rank 1 never reached all_reduce #"), verdict
    assert "rank 1 is at __getitem__ (test_hang_report.py:" in verdict


def slow_steps(steps: int, pause: float) -> int:
    rank = _rank()
    if rank == 0:
        _mark()  # from here on: no report, though the run lasts longer than stall_timeout
    for step in range(steps):
        time.sleep(pause)
        dist.all_reduce(torch.ones(1))
        if rank == 0:
            print(f"step {step}", flush=True)  # progress the launcher sees
    return steps


def test_a_slow_but_progressing_run_is_not_reported():
    reports = Reports()
    stall = 2 * STALL
    notebook_launch(
        slow_steps, args=(8, stall / 4), num_processes=2, stall_timeout=stall, observers=[reports], quiet=True
    )
    assert (
        time.monotonic() - reports.armed_at > stall
    )  # long enough that a detector ignoring progress reports
    assert reports == []


def test_stall_timeout_none_turns_the_report_off_over_the_config():
    reports = Reports()
    notebook_launch(
        skip_barrier,
        args=(3 * STALL,),
        num_processes=2,
        config=LaunchConfig(stall_timeout=STALL),
        stall_timeout=None,
        observers=[reports],
        quiet=True,
    )
    assert reports == []


def late_join(pause: float) -> None:
    if int(__import__("os").environ["RANK"]) == 1:
        _mark()
        time.sleep(pause)
    _rank()  # Accelerator(): init_process_group


def test_a_rank_missing_from_the_rendezvous_is_named():
    reports = Reports()
    notebook_launch(
        late_join, args=(4 * STALL,), num_processes=2, stall_timeout=STALL, observers=[reports], quiet=True
    )
    assert reports and reports[0].kind == RENDEZVOUS, [r.verdict for r in reports]
    assert reports[0].verdict.startswith("rank 1 never joined the rendezvous (init_process_group)")


def busy(pause: float) -> str:
    _rank()
    time.sleep(pause)
    return "finished"


def busy_until(release: str) -> str:
    _rank()
    deadline = time.monotonic() + 120
    while not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.05)  # the ranks stay here until the test has its report, however slow the start
    return "finished"


def test_handle_stacks_on_a_running_launch(tmp_path):
    release = str(tmp_path / "release")
    handle = start_launch(busy_until, args=(release,), num_processes=2, stall_timeout=None, quiet=True)
    try:
        deadline = time.monotonic() + 60
        report = handle.stacks()
        while not all("time.sleep(0.05)" in state.stack for state in report.ranks):
            assert time.monotonic() < deadline, report.text()  # still starting up: ask again
            time.sleep(0.2)
            report = handle.stacks()
        assert report.reason == "asked" and report.kind == BUSY, report.verdict
        assert "every rank is busy in its own code" in str(report)
    finally:
        open(release, "w").close()
        result = handle.wait(60)
    assert list(result) == ["finished", "finished"]  # the report did not stop the run
    with pytest.raises(RuntimeError, match="has ended"):
        handle.stacks()


def test_the_run_views_stacks_button_shows_a_report():
    from notebook_launcher import RunView

    view = RunView()
    handle = start_launch(
        busy, args=(3.0,), num_processes=2, stall_timeout=None, observers=[view], quiet=True
    )
    try:
        deadline = time.monotonic() + 30
        while view.hang_box.button.disabled and time.monotonic() < deadline:
            time.sleep(0.05)
        view.hang_box.button.click()
        while view.hang_box.report is None and time.monotonic() < deadline:
            time.sleep(0.05)
        report = view.hang_box.report
        assert report is not None and report.reason == "asked"
        assert "Stack report" in view.hang_box.pane.value
        assert view.hang_box.pane.layout.display == ""
    finally:
        handle.wait(60)
    assert view.hang_box.button.disabled  # nothing left to ask once the run has ended


def test_in_process_refuses_a_stall_timeout():
    from notebook_launcher.errors import ConfigError

    with pytest.raises(ConfigError, match="stall_timeout=5 cannot be applied"):
        notebook_launch(busy, args=(0.0,), in_process=True, stall_timeout=5)


# ------------------------------------------------------------ the verdict alone (no processes)
def _stack(*frames: tuple[str, int, str]) -> str:
    lines = ["Current thread 0x00007f0000000001 (most recent call first):"]
    lines += [f'  File "{file}", line {line} in {func}' for file, line, func in frames]
    return "\n".join(lines)


def test_the_verdict_falls_back_on_the_stack_for_ddps_uncounted_collectives():
    from notebook_launcher.launch.supervise.hang_report import RankState, judge, user_frames_first
    from notebook_launcher.records.activity import IDLE, Activity

    torch_file = "/venv/lib/python3.11/site-packages/torch/autograd/graph.py"
    launcher_file = "/venv/lib/python3.11/site-packages/notebook_launcher/runtime/accelerator/facade.py"
    waiting = _stack(
        (torch_file, 9, "_engine_run_backward"), (launcher_file, 5, "backward"), ("/nb/cell.py", 13, "train")
    )
    sleeping = _stack(("/nb/cell.py", 12, "train"))
    idle = Activity(IDLE, 0, "", 0.0)
    kind, verdict = judge([RankState(0, idle, waiting), RankState(1, idle, sleeping)], now=10.0)
    assert kind == MISSING
    assert verdict.startswith("rank 1 never reached the collective that rank 0 waits in (rank 0 in backward")
    assert verdict.endswith("rank 1 is at train (cell.py:12)")
    folded = user_frames_first(waiting).splitlines()
    assert folded[1].endswith("in _engine_run_backward")  # the innermost frame: what it waits in
    assert folded[2] == "  ... 1 frame in notebook_launcher" and folded[3].endswith("in train")


def test_one_report_per_stall_and_again_after_progress_resumed():
    from types import SimpleNamespace

    from notebook_launcher.launch.supervise.stall import HangWatch

    watch = HangWatch(0.05)
    workers = [SimpleNamespace(rank=0, started=True, exited=False)]
    try:
        time.sleep(0.1)
        assert watch.stalled(workers)
        watch.report("stall", workers, {})
        time.sleep(0.1)
        assert not watch.stalled(workers)  # the same stall: reported once
        watch(OutputLine(0, "stderr", '  File "x.py", line 3 in f'))  # our own stack dump: not progress
        time.sleep(0.1)
        assert not watch.stalled(workers)
        watch(OutputLine(0, "stdout", "step 7"))  # progress resumed ...
        assert not watch.stalled(workers)
        time.sleep(0.1)
        assert watch.stalled(workers)  # ... and stalled again
    finally:
        watch.close()
