"""A small line chart drawn as inline SVG, so a plain `ipywidgets.HTML` can show live metrics.

No plotting library: the chart is a few hundred bytes of markup re-sent when the data changes,
which renders in JupyterLab, Notebook 7 and saved notebooks alike.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

Point = tuple[float, float]

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
MAX_POINTS = 400  # per series; longer series are thinned evenly (last point kept)


def thin(points: Sequence[Point], limit: int = MAX_POINTS) -> list[Point]:
    """At most `limit` points, evenly spaced over the series, always keeping the first and last."""
    if len(points) <= limit:
        return list(points)
    stride = (len(points) - 1) / (limit - 1)
    return [points[round(i * stride)] for i in range(limit)]


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def svg_chart(
    series: Mapping[str, Sequence[Point]],
    *,
    title: str = "",
    width: int = 560,
    height: int = 220,
) -> str:
    """SVG markup of one line per series over a shared x (step) and y range.

    The markup carries `data-points` (total points drawn) so tests and users can check it.
    """
    margin_left, margin_right, margin_top, margin_bottom = 56, 12, 22, 28
    plot_w = width - margin_left - margin_right
    plot_h = height - margin_top - margin_bottom
    drawn = {name: thin(points) for name, points in series.items() if points}
    total = sum(len(p) for p in drawn.values())
    head = (
        f'<svg class="nl-chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" data-points="{total}" role="img" '
        f'aria-label="{html.escape(title or "metrics chart")}">'
    )
    parts = [head, f'<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>']
    if title:
        parts.append(
            f'<text x="{margin_left}" y="14" font-size="12" font-family="sans-serif">{html.escape(title)}</text>'
        )
    if not drawn:
        parts.append(
            f'<text x="{width / 2}" y="{height / 2}" font-size="12" text-anchor="middle" fill="#888" '
            'font-family="sans-serif">no metrics yet: call accelerator.log({...}) in the workers</text></svg>'
        )
        return "".join(parts)

    xs = [x for points in drawn.values() for x, _ in points]
    ys = [y for points in drawn.values() for _, y in points]
    x_lo, x_hi = min(xs), max(xs)
    y_lo, y_hi = min(ys), max(ys)
    if x_hi == x_lo:
        x_hi = x_lo + 1
    if y_hi == y_lo:
        y_lo, y_hi = y_lo - 0.5, y_hi + 0.5

    def to_px(x: float, y: float) -> str:
        px = margin_left + (x - x_lo) / (x_hi - x_lo) * plot_w
        py = margin_top + (1 - (y - y_lo) / (y_hi - y_lo)) * plot_h
        return f"{px:.1f},{py:.1f}"

    bottom = margin_top + plot_h
    axis = 'stroke="#999" stroke-width="1"'
    label = 'font-size="10" font-family="sans-serif" fill="#555"'
    parts += [
        f'<line x1="{margin_left}" y1="{margin_top}" x2="{margin_left}" y2="{bottom}" {axis}/>',
        f'<line x1="{margin_left}" y1="{bottom}" x2="{margin_left + plot_w}" y2="{bottom}" {axis}/>',
        f'<text x="{margin_left - 4}" y="{margin_top + 8}" text-anchor="end" {label}>{_fmt(y_hi)}</text>',
        f'<text x="{margin_left - 4}" y="{bottom}" text-anchor="end" {label}>{_fmt(y_lo)}</text>',
        f'<text x="{margin_left}" y="{bottom + 14}" {label}>{_fmt(x_lo)}</text>',
        f'<text x="{margin_left + plot_w}" y="{bottom + 14}" text-anchor="end" {label}>step {_fmt(x_hi)}</text>',
    ]
    legend_x = width - margin_right
    for index, (name, points) in enumerate(drawn.items()):
        color = COLORS[index % len(COLORS)]
        coords = " ".join(to_px(x, y) for x, y in points)
        parts.append(
            f'<polyline class="nl-series" data-name="{html.escape(name)}" fill="none" stroke="{color}" '
            f'stroke-width="1.5" points="{coords}"/>'
        )
        if len(points) == 1:
            cx, cy = to_px(*points[0]).split(",")
            parts.append(f'<circle cx="{cx}" cy="{cy}" r="2.5" fill="{color}"/>')
        last = points[-1][1]
        parts.append(
            f'<text x="{legend_x}" y="{14 + 12 * index}" text-anchor="end" font-size="11" '
            f'font-family="sans-serif" fill="{color}">{html.escape(name)} {_fmt(last)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)
