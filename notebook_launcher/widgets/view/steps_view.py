"""The RunView's "steps" tab: each rank's step as one stacked bar (data, compute, wait, other) and
the verdict above them (estimate/performance.py decides it), redrawn as the ranks report."""

from __future__ import annotations

import html
from typing import Any

from ...estimate.performance import PerformanceReport

COLOURS = {"data": "#f9a825", "compute": "#1e88e5", "wait": "#e53935", "other": "#9e9e9e"}


def steps_html(figures: dict[int, dict[str, Any]]) -> str:
    """HTML for the tab; a line saying why it is empty until the first measured step."""
    report = PerformanceReport.from_payloads(figures)
    if not report.ranks:
        return (
            '<div class="nl-steps" style="color:#777;font-size:12px">No optimizer step measured yet '
            "(steps of a prepared optimizer are; see docs/performance.md).</div>"
        )
    slowest = max(r.step_ms for r in report.ranks)
    colour = "#2e7d32" if report.balanced else "#c62828"
    rows = [
        f'<div class="nl-steps-verdict" style="color:{colour};margin-bottom:6px">{html.escape(report.verdict)}</div>'
    ]
    for rank in report.ranks:
        parts = {
            "data": rank.data_ms,
            "compute": rank.compute_ms,
            "wait": rank.wait_ms,
            "other": rank.other_ms,
        }
        width = 100 * rank.step_ms / slowest if slowest else 0
        bar = "".join(
            f'<div title="{name} {ms:.1f} ms" style="width:{100 * ms / rank.step_ms if rank.step_ms else 0:.2f}%;'
            f'background:{COLOURS[name]}"></div>'
            for name, ms in parts.items()
            if ms > 0
        )
        label = " · ".join(f"{name} {ms:.1f}" for name, ms in parts.items())
        rows.append(
            f'<div class="nl-steps-rank" style="display:flex;align-items:center;gap:8px;font-size:12px">'
            f'<span style="width:52px">rank {rank.rank}</span>'
            f'<div style="display:flex;height:14px;width:{width * 0.6:.1f}%;min-width:2px">{bar}</div>'
            f"<span>{rank.step_ms:.1f} ms/step ({html.escape(label)} ms)</span></div>"
        )
    rows.append(colour_legend(COLOURS.items()))
    return "".join(rows)


def colour_legend(items: Any, note: str = "") -> str:
    """One line of coloured squares with their names ((name, colour) pairs), then `note`: the legend
    under the steps and pipeline tabs."""
    legend = " ".join(
        f'<span style="display:inline-block;width:10px;height:10px;background:{colour}"></span> {name}'
        for name, colour in items
    )
    return f'<div style="font-size:11px;color:#555;margin-top:4px">{legend}{note}</div>'
