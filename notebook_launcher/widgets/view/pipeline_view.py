"""The RunView's "pipeline" tab: one lane per pipeline rank (its stages), the forward / backward /
weight-gradient block of every micro-batch where it ran in the last measured step (measured times,
not the ideal schedule; the gaps are idle), and each rank's measured bubble beside the schedule's
ideal. Drawn from the step clock's payload (runtime/parallel/pipeline/timeline.py)."""

from __future__ import annotations

import html
from typing import Any

from .steps_view import colour_legend

COLOURS = {"F": "#1e88e5", "B": "#43a047", "W": "#00897b"}
NAMES = {"F": "forward", "B": "backward", "W": "weight gradients"}


def has_pipeline(figures: dict[int, dict[str, Any]]) -> bool:
    return any(isinstance(f.get("pipeline"), dict) for f in figures.values())


def pipeline_html(figures: dict[int, dict[str, Any]]) -> str:
    """HTML for the tab; a line saying why it is empty until a pipeline step is measured."""
    ranks = {
        rank: f["pipeline"] for rank, f in sorted(figures.items()) if isinstance(f.get("pipeline"), dict)
    }
    if not ranks:
        return (
            '<div class="nl-pipeline" style="color:#777;font-size:12px">No pipeline step measured yet.</div>'
        )
    span = max(float(p.get("step_ms", 0.0)) for p in ranks.values()) or 1.0
    first = next(iter(ranks.values()))
    rows = [
        f'<div class="nl-pipeline-head" style="font-size:12px;margin-bottom:6px">{html.escape(str(first.get("schedule")))}, '
        f"{first.get('microbatches')} micro-batches: the last step, {span:.1f} ms (blocks: micro-batch number)</div>"
    ]
    for rank, p in ranks.items():
        blocks = []
        for stage, kind, chunk, t0, t1 in p.get("blocks", []):
            left, width = 100 * float(t0) / span, max(0.3, 100 * (float(t1) - float(t0)) / span)
            title = f"stage {stage} {NAMES.get(kind, kind)} of micro-batch {chunk}: {t0:.1f}-{t1:.1f} ms"
            blocks.append(
                f'<div class="nl-pipeline-block nl-pipeline-{kind}" title="{html.escape(title)}" '
                f'style="position:absolute;left:{left:.2f}%;width:{width:.2f}%;top:1px;bottom:1px;'
                f"background:{COLOURS.get(kind, '#9e9e9e')};color:white;font-size:10px;overflow:hidden;"
                f'text-align:center">{chunk}</div>'
            )
        bubble = float(p.get("mean_bubble", p.get("bubble", 0.0)))
        ideal = float(p.get("ideal_bubble", 0.0))
        rows.append(
            f'<div class="nl-pipeline-lane" style="display:flex;align-items:center;gap:8px;font-size:12px;'
            f'margin:2px 0"><span style="width:150px">rank {rank} · stage(s) {p.get("stages")}</span>'
            f'<div style="position:relative;height:18px;flex:1;background:#eeeeee">{"".join(blocks)}</div>'
            f'<span style="width:230px">bubble {bubble:.3f} (ideal {ideal:.3f})</span></div>'
        )
    rows.append(
        colour_legend(
            [*((NAMES[kind], colour) for kind, colour in COLOURS.items()), ("idle ·", "#eeeeee")],
            " bubble: the share of a step a rank waits for the other stages (mean over the steps)",
        )
    )
    return "".join(rows)
