"""RunView fed with synthetic launch events: panes per rank, progress, chart, Stop, status."""

from __future__ import annotations

import re
import threading

from notebook_launcher.launch.events import (
    MetricLogged,
    OutputLine,
    ProgressUpdate,
    RunFinished,
    RunStarted,
    StepsMeasured,
)
from notebook_launcher.widgets import RunView
from notebook_launcher.widgets.view.chart import svg_chart, thin
from notebook_launcher.widgets.view.run_state import RunState, format_seconds


def started(world_size: int = 2) -> RunStarted:
    return RunStarted(
        world_size=world_size, local_ranks=tuple(range(world_size)), start_method="fork", config=None
    )


def polyline_points(svg: str) -> list[list[tuple[float, float]]]:
    lines = re.findall(r'<polyline[^>]*points="([^"]*)"', svg)
    return [[tuple(map(float, p.split(","))) for p in line.split()] for line in lines]


def test_one_pane_per_rank_plus_all_ranks():
    view = RunView(refresh_interval=0)
    view(started(2))
    view(OutputLine(0, "stdout", "hello from 0"))
    view(OutputLine(1, "stdout", "hello from 1"))
    view(OutputLine(1, "stderr", "warning <b>not html</b>"))
    assert view.tabs.titles == ("all ranks", "rank 0", "rank 1", "steps")
    assert view.tabs.children[0] is view.panes[-1]
    assert "hello from 0" in view.panes[0].value and "hello from 1" not in view.panes[0].value
    assert "hello from 1" in view.panes[1].value
    assert "&lt;b&gt;not html&lt;/b&gt;" in view.panes[1].value  # escaped, and stderr is red
    assert 'color:#c62828">warning' in view.panes[1].value
    assert "[rank 0] hello from 0" in view.panes[-1].value and "[rank 1] hello from 1" in view.panes[-1].value


def test_a_rank_seen_only_in_output_gets_a_pane():
    view = RunView(refresh_interval=0)
    view(OutputLine(3, "stdout", "late rank"))
    assert "rank 3" in view.tabs.titles and "late rank" in view.panes[3].value


def test_progress_bar_steps_and_time_left():
    view = RunView(refresh_interval=0)
    view(started(2))
    for step in range(1, 6):  # one batch per second, 10 batches in the epoch
        view(ProgressUpdate(rank=0, step=step, total=10, time=100.0 + step, epoch=0))
        view(ProgressUpdate(rank=1, step=step - 1 or 1, total=10, time=100.0 + step, epoch=0))
    assert (view.progress.value, view.progress.max) == (5, 10)  # the main rank, rank 0
    assert view.progress_label.value == "epoch 0 · step 5/10 · 5.0 s left"
    view(ProgressUpdate(rank=0, step=1, total=10, time=106.0, epoch=1))  # a new epoch restarts the bar
    assert (view.progress.value, view.progress_label.value) == (1, "epoch 1 · step 1/10")
    view(RunFinished("done", duration=12.0))
    assert view.progress.bar_style == "success" and view.progress.value == view.progress.max


def test_progress_from_logged_steps_when_no_loader_reports():
    view = RunView(refresh_interval=0)
    view(started(1))
    view(MetricLogged(rank=0, step=7, values={"loss": 0.5}, time=1.0))
    assert view.progress_label.value == "step 7"
    assert view.progress.layout.visibility == "hidden"  # no loader progress: no bar pretending


def test_chart_draws_the_main_rank_and_can_switch():
    view = RunView(refresh_interval=0)
    view(started(2))
    for step in range(20):
        view(
            MetricLogged(
                rank=0, step=step, values={"loss": 1.0 / (step + 1), "lr": 0.1, "tag": "x"}, time=float(step)
            )
        )
        view(MetricLogged(rank=1, step=step, values={"loss": 2.0 / (step + 1)}, time=float(step)))
    assert view.metric_select.options == ("loss", "lr")  # numeric metrics only
    assert view.metric_select.value == "loss" and view.rank_select.value == 0
    lines = polyline_points(view.chart.value)
    assert len(lines) == 1 and len(lines[0]) == 20
    ys = [y for _, y in lines[0]]
    assert ys == sorted(ys)  # loss falls, so the pixel y grows
    assert 'data-points="20"' in view.chart.value and "loss (rank 0)" in view.chart.value
    view.rank_select.value = -1
    assert len(polyline_points(view.chart.value)) == 2 and "rank 1" in view.chart.value
    view.metric_select.value = "lr"
    assert "lr (all ranks)" in view.chart.value
    assert len(view.metrics) == 40 and view.metrics[0] == {
        "rank": 0,
        "step": 0,
        "time": 0.0,
        "loss": 1.0,
        "lr": 0.1,
        "tag": "x",
    }


def test_status_lines():
    cases = [
        (RunFinished("done", 3.25), "done in 3.2 s", "#2e7d32"),
        (
            RunFinished("failed", 61.0, failed_rank=1, error="ValueError: boom"),
            "failed at rank 1 after 1:01: ValueError: boom",
            "#c62828",
        ),
        (RunFinished("stopped", 2.0), "stopped after 2.0 s", "#ef6c00"),
        (
            RunFinished("timeout", 30.0, error="no progress for 30 s"),
            "timed out after 30.0 s: no progress for 30 s",
            "#c62828",
        ),
    ]
    for event, text, color in cases:
        view = RunView(refresh_interval=0)
        view(started(2))
        assert "running on 2 process(es)" in view.status.value
        view(event)
        assert text in view.status.value and color in view.status.value
        assert view.stop_button.disabled


def test_stop_button_flags_the_poll_hook_and_calls_back_once():
    view = RunView(refresh_interval=0)
    view(started(2))
    calls = []

    class Handle:
        def stop(self):
            calls.append("stop")

    view.attach(Handle())
    assert view.poll() is False
    view.stop_button.click()
    view.stop_button.click()
    assert view.poll() is True and view.stop_requested
    assert calls == ["stop"]
    assert view.stop_button.disabled and view.stop_button.description == "Stopping…"
    late = []
    view.on_stop(lambda: late.append(1))  # registered after the click: called at once
    assert late == [1]
    view(RunFinished("stopped", 1.0))
    assert "stopped after" in view.status.value


def test_stop_after_the_run_finished_does_nothing():
    view = RunView(refresh_interval=0)
    view(started(1))
    view(RunFinished("done", 1.0))
    view.request_stop()
    assert view.stop_requested is False


def test_events_are_buffered_between_refreshes():
    view = RunView(refresh_interval=3600)
    view(started(1))  # the first event draws (nothing drawn yet)
    for i in range(1000):
        view(OutputLine(0, "stdout", f"line {i}"))
    assert "line 999" not in view.panes[0].value  # buffered, not drawn per line
    view(RunFinished("done", 1.0))  # the end is always drawn
    assert "line 999" in view.panes[0].value and "line 499" not in view.panes[0].value  # last 500 shown
    assert len(view.state.lines[0]) == 1000


def test_events_from_a_background_thread():
    view = RunView(refresh_interval=0.01)

    def supervise():
        view(started(2))
        for i in range(300):
            view(OutputLine(i % 2, "stdout", f"bg {i}"))
            view(MetricLogged(0, i, {"loss": float(i)}, float(i)))
        view(RunFinished("done", 1.0))

    thread = threading.Thread(target=supervise)
    thread.start()
    while thread.is_alive():
        view.poll()
    thread.join(timeout=10)
    assert "bg 299" in view.panes[1].value and "bg 298" in view.panes[0].value
    assert len(view.metrics) == 300 and "done in" in view.status.value


def test_chart_thins_long_series_and_handles_edge_cases():
    points = [(float(i), float(i % 7)) for i in range(10_000)]
    kept = thin(points)
    assert len(kept) == 400 and kept[0] == points[0] and kept[-1] == points[-1]
    svg = svg_chart({"loss": points})
    assert 'data-points="400"' in svg
    assert "no metrics yet" in svg_chart({})
    flat = svg_chart({"acc": [(0.0, 1.0), (1.0, 1.0)]})  # constant series: no division by zero
    assert len(polyline_points(flat)[0]) == 2
    assert "<circle" in svg_chart({"one": [(3.0, 2.0)]})


def test_state_series_without_steps_and_time_format():
    state = RunState()
    state.apply(MetricLogged(0, None, {"loss": 3.0}, 0.0))
    state.apply(MetricLogged(0, None, {"loss": 2.0}, 1.0))
    state.apply(MetricLogged(0, None, {"loss": float("nan")}, 2.0))
    assert state.series("loss", 0) == [(0.0, 3.0), (1.0, 2.0)]
    assert [format_seconds(s) for s in (0.44, 59.9, 65, 3723)] == ["0.4 s", "59.9 s", "1:05", "1:02:03"]


def test_a_failed_ranks_remote_traceback_goes_to_its_pane():
    class FakeWorkerError(Exception):
        rank = 1
        remote_traceback = 'Traceback (most recent call last):\n  File "<cell>", line 3\nValueError: boom'

    view = RunView(refresh_interval=0)
    view(started(2))
    view(RunFinished("failed", 1.0, failed_rank=1, error="rank 1 raised ValueError: boom"))
    view.show_error(FakeWorkerError())
    view.show_error(KeyError("no rank, no traceback: ignored"))
    assert 'color:#c62828">ValueError: boom' in view.panes[1].value
    assert "ValueError" not in view.panes[0].value
    assert "failed at rank 1" in view.status.value


def test_a_traceback_sent_with_run_finished_is_shown_once():
    view = RunView(refresh_interval=0)
    view(started(2))
    traceback = "Traceback (most recent call last):\nValueError: from extra"
    view(
        RunFinished(
            "failed", 1.0, failed_rank=0, error="rank 0 raised ValueError", extra={"traceback": traceback}
        )
    )

    class SameError(Exception):
        rank = 0
        remote_traceback = traceback

    view.show_error(SameError())
    assert view.panes[0].value.count("ValueError: from extra") == 1


def test_stop_tooltip_tells_when_clicks_cannot_reach_a_blocked_cell():
    view = RunView(refresh_interval=0)
    assert view.poll() is False  # pytest is not a Jupyter kernel: no comm pump
    assert "not running inside a Jupyter kernel" in view.stop_button.tooltip


def test_the_steps_tab_draws_each_ranks_breakdown_and_names_the_straggler():
    view = RunView(refresh_interval=0)
    view(started(2))
    assert "No optimizer step measured yet" in view.steps_pane.value
    # rank 1 reads its data for 40 ms of a 60 ms step; rank 0 waits 45 ms for it
    view(StepsMeasured(0, {"steps": 10, "step_s": 0.6, "data_s": 0.02, "forward_s": 0.05, "wait_s": 0.45}))
    view(StepsMeasured(1, {"steps": 10, "step_s": 0.6, "data_s": 0.4, "forward_s": 0.05, "wait_s": 0.02}))
    pane = view.steps_pane.value
    assert "rank 1 is the straggler: its data loading takes" in pane
    assert pane.count('class="nl-steps-rank"') == 2 and "60.0 ms/step" in pane
    assert 'title="data 40.0 ms"' in pane  # rank 1's data part of its bar


def test_the_checkpoint_line_shows_the_save_in_flight_per_rank_then_the_last_complete_one():
    from notebook_launcher.launch.events import CheckpointSaved, CheckpointWriting, RunRestarting

    view = RunView(refresh_interval=0)
    view(started(2))
    view.refresh()
    assert view.checkpoint_line.layout.display == "none"  # nothing saved yet: nothing shown
    path = "/runs/a/checkpoints/checkpoint_3"
    view(CheckpointWriting(0, 120, path, 12_000_000, 40_100_000, "writing", 1.0))
    view(CheckpointWriting(1, 120, path, 3_100_000, 3_000_000, "written", 1.0))
    view.refresh()
    line = view.checkpoint_line.value
    assert "checkpoint_3 (step 120) being written: rank 0 12.0 of 40.1 MB, rank 1 written (3.1 MB)" in line
    assert "last complete checkpoint: none yet" in line and view.checkpoint_line.layout.display == ""
    view(CheckpointSaved(path, 120, 0.14, 3.2, True))
    view(CheckpointWriting(0, 160, path.replace("_3", "_4"), 0, 40_100_000, "staged", 2.0))
    view.refresh()
    line = view.checkpoint_line.value
    assert "checkpoint_4 (step 160) being written: rank 0 0.0 of 40.1 MB" in line
    assert (
        "last complete checkpoint: checkpoint_3 (step 120, training waited 0.14 s, published after 3.20 s)"
        in line
    )
    view(RunRestarting(1, 2, "rank 1 was killed (SIGKILL)", path))  # checkpoint_4 was cut off
    view.refresh()
    assert "being written" not in view.checkpoint_line.value
    assert "restart 1/2" in view.status.value  # the restart still reaches the status line
