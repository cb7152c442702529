"""The RunView's hang report: a Stacks button that asks the running launch where every rank is, and
a box showing the latest report (a stall's, the timeout's, or the one asked for) with its verdict."""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets

_TITLES = {"stall": "No progress: hang report", "timeout": "Timeout: hang report", "asked": "Stack report"}


class HangBox:
    """`button` goes next to Stop, `pane` under the progress bar; both are plain ipywidgets."""

    def __init__(self) -> None:
        self.button = widgets.Button(
            description="Stacks",
            icon="search",
            disabled=True,
            tooltip="Show where every rank is now (stacks, the collective it is in, a verdict); the run goes on",
        )
        self.button.on_click(lambda _button: self.ask())
        self.pane = widgets.HTML("", layout=widgets.Layout(display="none", width="100%"))
        self.pane.add_class("nl-hang-report")
        self._ask: Callable[[], Any] | None = None
        self.report: Any = None  # the latest HangReport shown

    def connect(self, ask: Callable[[], Any] | None) -> None:
        """The launch's way to ask for a report (RunStarted.ask_report); None: the button stays off."""
        self._ask = ask
        self.button.disabled = ask is None

    def ask(self) -> None:
        if self._ask is not None and not self.button.disabled:
            self.button.description = "Asking…"
            self._ask()

    def show(self, report: Any) -> None:
        self.report = report
        self.button.description = "Stacks"
        title = _TITLES.get(report.reason, "Hang report")
        self.pane.value = (
            f'<div style="border-left:4px solid #ef6c00;padding:2px 8px;margin:4px 0">'
            f"<b>{html.escape(title)}</b> — {html.escape(report.verdict)}"
            f'<details><summary>stacks of every rank</summary><pre style="font-size:12px;white-space:pre-wrap">'
            f"{html.escape(report.text())}</pre></details></div>"
        )
        self.pane.layout.display = ""

    def finish(self) -> None:
        self._ask = None
        self.button.disabled = True
        self.button.description = "Stacks"
