"""The ranks' tqdm bars as one display output: an HTML table (one row per rank and bar) and its text.

One row per rank and bar, not rank 0's alone: ranks rarely run in lockstep (uneven data, a slow
GPU, a rank stuck in a collective), and the rank that lags is the one a user looks for. All rows
share one output that is redrawn a few times a second, so eight ranks cost no more messages than
one. Finished bars stay with their final count; beyond KEEP_CLOSED per rank the oldest fold into
a one-line count.
"""

from __future__ import annotations

from collections.abc import Iterable
from html import escape
from typing import Any

KEEP_CLOSED = 4  # finished bars kept per rank (e.g. the last epochs)


def prune(bars: dict[tuple[int, int], Any]) -> int:
    """Drop the oldest finished bars beyond KEEP_CLOSED per rank; returns how many were dropped."""
    dropped = 0
    for rank in {key[0] for key in bars}:
        closed = [key for key, bar in bars.items() if key[0] == rank and bar.closed]
        for key in closed[: max(0, len(closed) - KEEP_CLOSED)]:
            del bars[key]
            dropped += 1
    return dropped


def bars_bundle(bars: Iterable[Any], folded: int = 0, prefix: bool = True) -> dict[str, str]:
    """text/html and text/plain of every bar (BarUpdate events), in the order given."""
    rows, lines = [], []
    for bar in bars:
        label = f"[rank{bar.rank}]" if prefix else ""
        value = f' value="{bar.n}"' if bar.total else ""
        maximum = f' max="{bar.total}"' if bar.total else ""
        done = " ✓" if bar.closed else ""
        rows.append(
            "<tr>"
            f'<td style="text-align:left;padding-right:0.5em"><code>{escape(label)}</code></td>'
            f'<td style="text-align:left">{escape(bar.desc)}</td>'
            f'<td><progress{value}{maximum} style="width:16em"></progress></td>'
            f'<td style="text-align:left"><code>{escape(bar.stats)}{done}</code></td>'
            "</tr>"
        )
        lines.append(f"{label} {bar.text}".strip())
    if folded:
        note = f"({folded} earlier finished bar{'s' if folded != 1 else ''} not shown)"
        rows.append(f'<tr><td colspan="4" style="text-align:left"><i>{note}</i></td></tr>')
        lines.append(note)
    html = '<table class="notebook-launcher-bars" style="border:none">' + "".join(rows) + "</table>"
    return {"text/html": html, "text/plain": "\n".join(lines)}
