"""ANSI colour codes in a line of text -> escaped HTML with coloured spans, for the RunView's panes.

A pane is an HTML widget, which would show escape codes as garbage: the folded traceback is
coloured like IPython's (launch/cell/colour.py), and workers print colours of their own (loggers,
progress). Only SGR colour codes are understood; other escape sequences are dropped.
"""

from __future__ import annotations

import html
import re

_ESCAPE = re.compile(r"\x1b\[([0-9;]*)([A-Za-z])")
# Jupyter's own ANSI palette (the notebook's output area colours), normal then bright.
_PALETTE = ("#3E424D", "#E75C58", "#00A250", "#DDB62B", "#208FFB", "#D160C4", "#60C6C8", "#C5C1B4")
_BRIGHT = ("#282C36", "#B22B31", "#007427", "#B27D12", "#0065CA", "#A03196", "#258F8F", "#A1A6B2")


def ansi_to_html(text: str) -> str:
    """`text` HTML-escaped, each coloured stretch in a <span style=...>."""
    if "\x1b[" not in text:
        return html.escape(text)
    out: list[str] = []
    state: dict[str, str] = {}
    position = 0
    for match in _ESCAPE.finditer(text):
        out.append(_span(html.escape(text[position : match.start()]), state))
        position = match.end()
        if match[2] == "m":
            state = _apply(state, match[1])
    out.append(_span(html.escape(text[position:]), state))
    return "".join(out)


def _span(chunk: str, state: dict[str, str]) -> str:
    if not chunk or not state:
        return chunk
    style = ";".join(f"{key}:{value}" for key, value in sorted(state.items()))
    return f'<span style="{style}">{chunk}</span>'


def _apply(state: dict[str, str], params: str) -> dict[str, str]:
    """The style after one SGR sequence (`1;31`, `0`, `38;5;28`, ...)."""
    state = dict(state)
    codes = [int(p) if p.isdigit() else 0 for p in params.split(";")] if params else [0]
    index = 0
    while index < len(codes):
        code = codes[index]
        if code == 0:
            state.clear()
        elif code == 1:
            state["font-weight"] = "bold"
        elif code == 22:
            state.pop("font-weight", None)
        elif 30 <= code <= 37 or 90 <= code <= 97:
            state["color"] = (_PALETTE if code < 90 else _BRIGHT)[code % 10]
        elif 40 <= code <= 47 or 100 <= code <= 107:
            state["background-color"] = (_PALETTE if code < 100 else _BRIGHT)[code % 10]
        elif code == 39:
            state.pop("color", None)
        elif code == 49:
            state.pop("background-color", None)
        elif code in (38, 48):  # 256-colour or RGB: not drawn, its parameters skipped
            index += 2 if index + 1 < len(codes) and codes[index + 1] == 5 else 4
        index += 1
    return state
