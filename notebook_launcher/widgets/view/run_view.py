"""RunView: a live view of one launch — per-rank output, progress, a metrics chart, Stop, status.

    view = RunView(); display(view)
    notebook_launch(train, num_processes=2, observers=[view], poll_hooks=[view.poll], quiet=True)

`view(event)` is the observer (any thread; cheap: events are buffered and drawn at most every
`refresh_interval` seconds). `view.poll()` is the poll hook of a blocking launch: it draws, lets
widget clicks through while the cell blocks (see kernel_pump) and returns True once Stop was
pressed, which asks the launch to stop. For a background launch, `view.attach(handle)` makes
Stop call `handle.stop()`.
"""

from __future__ import annotations

import html
import threading
import time
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets

from ...launch.cell.progress_view import bars_bundle
from ...launch.events import HangReported, RunFinished, RunStarted
from ..panel.mesh import mesh_grid_html
from .ansi_html import ansi_to_html
from .chart import svg_chart
from .hang_view import HangBox
from .kernel_pump import CommPump
from .pipeline_view import has_pipeline, pipeline_html
from .run_state import RunState
from .steps_view import steps_html

ALL_RANKS = -1
SHOWN_LINES = 500  # lines drawn per pane; the state keeps more
PANE_HEIGHT = "260px"
STATUS_COLORS = {"done": "#2e7d32", "failed": "#c62828", "stopped": "#ef6c00", "timeout": "#c62828"}
BAR_STYLES = {"done": "success", "failed": "danger", "stopped": "warning", "timeout": "danger"}


class RunView(widgets.VBox):
    """Live view of a launch. Call it with launch events; use `poll` as a launch poll hook."""

    def __init__(self, *, refresh_interval: float = 0.25, title: str = "notebook_launcher run") -> None:
        self.state = RunState()
        self.refresh_interval = refresh_interval
        self.stop_requested = False
        self._pending: list[Any] = []
        self._lock = threading.RLock()
        self._last_draw = float("-inf")
        self._stop_callbacks: list[Callable[[], Any]] = []
        self._pump: CommPump | None = None
        self._drawn_lines: dict[int, int] = {}
        self._drawn_metrics = -1

        self.heading = widgets.HTML(f"<b>{html.escape(title)}</b>")
        self.status = widgets.HTML(self._status_html(), layout=widgets.Layout(flex="1 1 auto"))
        self.stop_button = widgets.Button(
            description="Stop", icon="stop", button_style="danger", tooltip="Stop every worker of this run"
        )
        self.stop_button.on_click(lambda _button: self.request_stop())
        self.hang_box = HangBox()  # Stacks button and the latest hang report
        self.mesh_grid = widgets.HTML("", layout=widgets.Layout(display="none"))  # a ParallelismConfig run
        self.memory_line = widgets.HTML("", layout=widgets.Layout(display="none"))
        self.memory_line.add_class("nl-memory")
        self.checkpoint_line = widgets.HTML("", layout=widgets.Layout(display="none"))  # in flight, last
        self._drawn_checkpoints = ""
        self.progress = widgets.IntProgress(value=0, min=0, max=1, layout=widgets.Layout(width="320px"))
        self.progress_label = widgets.Label("")
        self.bars = widgets.HTML("", layout=widgets.Layout(display="none"))  # the ranks' tqdm bars
        self._drawn_bars: Any = None
        self.tabs = widgets.Tab(layout=widgets.Layout(width="100%"))
        self.panes: dict[int, widgets.HTML] = {}
        self.steps_pane = widgets.HTML(steps_html({}), layout=widgets.Layout(width="100%"))
        self.steps_pane.add_class("nl-pane-steps")
        self._drawn_steps: dict[int, Any] = {}
        self.pipeline_pane = widgets.HTML("", layout=widgets.Layout(width="100%"))  # a tab once a
        self.pipeline_pane.add_class("nl-pane-pipeline")  # pipeline step is measured
        self.metric_select = widgets.Dropdown(
            options=[], description="metric", layout=widgets.Layout(width="220px")
        )
        self.rank_select = widgets.Dropdown(
            options=[], description="rank", layout=widgets.Layout(width="180px")
        )
        self.chart = widgets.HTML(svg_chart({}))
        self.metric_select.observe(lambda _change: self._draw_chart(force=True), names="value")
        self.rank_select.observe(lambda _change: self._draw_chart(force=True), names="value")
        self._set_ranks([])
        # shown once there is something to show: progress (or logged steps), metrics
        self.progress_row = widgets.HBox(
            [self.progress, self.progress_label], layout=widgets.Layout(display="none")
        )
        self.chart_box = widgets.VBox(
            [widgets.HBox([self.metric_select, self.rank_select]), self.chart],
            layout=widgets.Layout(display="none"),
        )
        super().__init__(
            children=[
                widgets.HBox(
                    [self.heading, self.status, self.hang_box.button, self.stop_button],
                    layout=widgets.Layout(width="100%"),
                ),
                self.mesh_grid,
                self.memory_line,
                self.checkpoint_line,
                self.progress_row,
                self.bars,
                self.hang_box.pane,
                self.tabs,
                self.chart_box,
            ]
        )
        self.add_class("nl-run-view")

    # -------------------------------------------------------------- observer side
    def __call__(self, event: Any) -> None:
        """Observer: buffer one launch event; draw when due (always at the start and the end)."""
        if isinstance(event, RunStarted):
            self.hang_box.connect(event.ask_report)
            self.show_mesh(getattr(event.config, "parallelism_config", None) or {}, event.world_size)
        elif isinstance(event, HangReported):
            self.hang_box.show(event.report)
        elif isinstance(event, RunFinished):
            self.hang_box.finish()
        with self._lock:
            self._pending.append(event)
            due = time.monotonic() - self._last_draw >= self.refresh_interval
            if due or isinstance(event, (RunStarted, RunFinished)):
                self.refresh()

    def show_mesh(self, section: dict[str, Any], world_size: int) -> None:
        """Draw the run's mesh as a grid of ranks (nothing for a run without one)."""
        self.mesh_grid.value = mesh_grid_html(section, world_size)
        self.mesh_grid.layout.display = "" if self.mesh_grid.value else "none"

    def poll(self) -> bool:
        """Poll hook: draw if due, handle widget clicks (main thread), True when Stop was pressed."""
        if time.monotonic() - self._last_draw >= self.refresh_interval:
            self.refresh()
        if threading.current_thread() is threading.main_thread():
            if self._pump is None:
                self._pump = CommPump()
                if not self._pump.available:  # say so where the user looks, not in a log
                    self.stop_button.tooltip = (
                        f"Stop cannot be clicked while this cell blocks: {self._pump.reason}"
                    )
            self._pump.pump()
        return self.stop_requested

    # --------------------------------------------------------------------- stop
    def request_stop(self) -> None:
        """What the Stop button does: flag the stop and tell every registered callback."""
        with self._lock:
            if self.stop_requested or self.state.finished is not None:
                return
            self.stop_requested = True
            self.stop_button.disabled = True
            self.stop_button.description = "Stopping…"
            callbacks = list(self._stop_callbacks)
        for callback in callbacks:
            callback()

    def on_stop(self, callback: Callable[[], Any]) -> None:
        """Call `callback()` when Stop is pressed (at once if it already was)."""
        self._stop_callbacks.append(callback)
        if self.stop_requested:
            callback()

    def attach(self, handle: Any) -> None:
        """Make Stop stop a background launch (`start_launch`'s RunHandle)."""
        self.on_stop(handle.stop)

    def show_error(self, error: BaseException) -> None:
        """Put a failed rank's remote traceback into its pane (the status line has the summary)."""
        rank = getattr(error, "rank", None)
        shown = getattr(error, "shown_traceback", None)  # folded and coloured (WorkerError)
        traceback = (shown(True) if callable(shown) else None) or getattr(error, "remote_traceback", None)
        traceback = traceback or getattr(error, "traceback", None)
        if not isinstance(rank, int) or not isinstance(traceback, str):
            return
        with self._lock:
            self.refresh()  # events first, so a traceback already sent with RunFinished wins
            self.state.add_traceback(rank, traceback)
            self.refresh()

    # ------------------------------------------------------------------ drawing
    @property
    def metrics(self) -> list[dict[str, Any]]:
        """Every metric row received so far: {"rank", "step", "time", **values}."""
        self.refresh()
        return list(self.state.metrics)

    def refresh(self) -> None:
        """Fold the buffered events in and update the widgets."""
        with self._lock:
            events, self._pending = self._pending, []
            for event in events:
                self.state.apply(event)
            self._last_draw = time.monotonic()
            if set(self.panes) != {ALL_RANKS, *self.state.ranks}:
                self._set_ranks(self.state.ranks)
            self._draw_panes()
            if self.state.steps != self._drawn_steps:  # the "steps" tab: where each rank's time goes
                self._drawn_steps = dict(self.state.steps)
                self.steps_pane.value = steps_html(self._drawn_steps)
                if has_pipeline(self._drawn_steps):
                    self.pipeline_pane.value = pipeline_html(self._drawn_steps)
                    if self.pipeline_pane not in self.tabs.children:
                        self._set_ranks(self.state.ranks)
            self._draw_progress()
            self._draw_bars()
            self._draw_chart()
            self.status.value = self._status_html()
            self._draw_memory()
            self._draw_checkpoints()
            if self.state.finished is not None:
                self.stop_button.disabled = True
                self.stop_button.description = "Stop"

    def _draw_bars(self) -> None:
        shown = (tuple(self.state.bars.values()), self.state.bars_folded)
        if shown == self._drawn_bars:
            return
        self._drawn_bars = shown
        self.bars.value = bars_bundle(shown[0], shown[1])["text/html"] if shown[0] else ""
        self.bars.layout.display = "" if shown[0] else "none"

    def _set_ranks(self, ranks: list[int]) -> None:
        keys = [ALL_RANKS, *ranks]
        for key in keys:
            if key not in self.panes:
                self.panes[key] = widgets.HTML(_pre([]), layout=widgets.Layout(width="100%"))
                self.panes[key].add_class(f"nl-pane-{'all' if key == ALL_RANKS else f'rank-{key}'}")
        pipeline = [self.pipeline_pane] if self.pipeline_pane.value else []
        self.tabs.children = [self.panes[key] for key in keys] + [self.steps_pane] + pipeline
        self.tabs.titles = (
            ["all ranks"] + [f"rank {rank}" for rank in ranks] + ["steps"] + ["pipeline"] * len(pipeline)
        )
        self._drawn_lines.clear()
        options = [(f"rank {rank}", rank) for rank in ranks] + (
            [("all ranks", ALL_RANKS)] if len(ranks) > 1 else []
        )
        current = self.rank_select.value
        self.rank_select.options = options or [("rank 0", 0)]
        self.rank_select.value = current if current in dict(options).values() else self.state.main_rank

    def _draw_panes(self) -> None:
        state = self.state
        for rank, lines in state.lines.items():
            seen = state.line_counts.get(rank, 0)
            if self._drawn_lines.get(rank) != seen:
                self.panes[rank].value = _pre([(stream, text) for stream, text in list(lines)[-SHOWN_LINES:]])
                self._drawn_lines[rank] = seen
        seen_all = state.total_lines
        if self._drawn_lines.get(ALL_RANKS) != seen_all:
            tail = list(state.all_lines)[-SHOWN_LINES:]
            self.panes[ALL_RANKS].value = _pre(
                [(stream, f"[rank {rank}] {text}") for rank, stream, text in tail]
            )
            self._drawn_lines[ALL_RANKS] = seen_all

    def _draw_progress(self) -> None:
        state = self.state
        rank = state.main_rank
        progress = state.progress.get(rank)
        if progress is not None:
            total = progress.total if progress.total else max(progress.step, 1)
            self.progress.max = max(total, 1)
            self.progress.value = min(progress.step, self.progress.max)
        self.progress.layout.visibility = "visible" if progress is not None else "hidden"
        text = state.progress_text(rank)
        if state.finished is not None:
            self.progress.bar_style = BAR_STYLES[state.finished.status]
            if state.finished.status == "done":
                self.progress.value = self.progress.max
        self.progress_label.value = text
        if text:
            self.progress_row.layout.display = ""

    def _draw_chart(self, force: bool = False) -> None:
        with self._lock:
            state = self.state
            names = state.metric_names()
            if names:
                self.chart_box.layout.display = ""
            if list(self.metric_select.options) != names:
                current = self.metric_select.value
                self.metric_select.options = names
                if names:
                    self.metric_select.value = (
                        current if current in names else ("loss" if "loss" in names else names[0])
                    )
            if not force and len(state.metrics) == self._drawn_metrics:
                return
            self._drawn_metrics = len(state.metrics)
            name, rank = self.metric_select.value, self.rank_select.value
            if not name:
                self.chart.value = svg_chart({})
                return
            ranks = state.ranks if rank == ALL_RANKS else [rank]
            series = {f"rank {r}" if len(ranks) > 1 else name: state.series(name, r) for r in ranks}
            where = "all ranks" if rank == ALL_RANKS else f"rank {rank}"
            self.chart.value = svg_chart(series, title=f"{name} ({where})")

    def _draw_memory(self) -> None:
        """Per-rank memory under the status line; a memory warning in red."""
        text = self.state.memory_text()
        warning = self.state.memory_warning
        if not text and warning is None:
            return
        body = html.escape(text)
        if warning is not None:
            body += f'<br><span style="color:#c62828">{html.escape(warning.text)}</span>'
        self.memory_line.value = f'<span style="font-size:12px;color:#555">{body}</span>'
        self.memory_line.layout.display = ""

    def _draw_checkpoints(self) -> None:
        """The save being written (step, folder, MB per rank) and the last complete checkpoint."""
        board = self.state.checkpoints
        if board.empty:
            return
        body = board.bundle()["text/html"]
        if body != self._drawn_checkpoints:
            self._drawn_checkpoints = self.checkpoint_line.value = body
            self.checkpoint_line.layout.display = ""

    def _status_html(self) -> str:
        finished = self.state.finished
        color = STATUS_COLORS.get(finished.status, "#333") if finished else "#333"
        text = html.escape(self.state.status_text())
        return f'<span class="nl-status" style="color:{color};margin-left:1em">{text}</span>'


def _pre(lines: list[tuple[str, str]]) -> str:
    """Lines as a scroll box that stays at the bottom (column-reverse keeps the end in view)."""
    body = "\n".join(
        f'<span style="color:#c62828">{html.escape(text)}</span>'
        if stream == "stderr" and "\x1b[" not in text  # coloured text keeps its own colours
        else ansi_to_html(text)
        for stream, text in lines
    )
    return (
        f'<div class="nl-output" style="display:flex;flex-direction:column-reverse;max-height:{PANE_HEIGHT};'
        f'overflow:auto;border:1px solid #ddd;background:#fafafa">'
        f'<pre style="flex:none;margin:4px;font-size:12px;white-space:pre-wrap">{body}</pre></div>'
    )
