"""How a launch's errors look in a notebook cell: one line of ours, then what the workers said.

IPython shows an exception through its `_render_traceback_()` when it has one (ipyparallel's remote
errors do the same), so the cell shows neither the launcher's own frames nor the message twice.
A worker's traceback is shown as IPython shows a local one (traceback_view.py: coloured when
colour.py says so, the user's frames with their source, libraries folded). File names of notebook
cells are shown as IPython shows local ones (`Cell In[3], line 6`): the worker ran the very code
the kernel compiled.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from . import colour
from .traceback_view import FOLD_HINT, has_folds, render_chain

_FILE_LINE = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')


def headline(name: str, text: str, on: bool | None = None) -> str:
    """The one line of ours: the error's name in red, as IPython colours an exception's name."""
    return f"{colour.paint(name, colour.EXCEPTION, colour.wanted() if on is None else on)}: {text}"


def shown_traceback(text: str, frames: list[dict[str, Any]] | None, on: bool | None = None) -> str:
    """A worker's traceback as the cell shows it: IPython's look, folded, from the captured frames;
    the plain text with cell names when there are none (a cluster engine's text, a crash)."""
    if frames:
        try:
            return render_chain(frames, on=colour.wanted() if on is None else on, label=_cell_labeller())
        except Exception:  # captured by another version, or odd: the plain text is never wrong
            pass
    return with_cell_names(text)


def with_cell_names(text: str) -> str:
    """Replace each notebook cell's temporary file name by IPython's `Cell In[N]` label."""
    label = _cell_labeller()
    if label is None:
        return text

    def replace(match: re.Match) -> str:
        named = label(match["file"])
        return f"{named}, line {match['line']}" if named else match[0]

    return _FILE_LINE.sub(replace, text)


def _cell_labeller():
    """IPython's own `Cell In[N]` naming, when this process is an IPython kernel or shell."""
    try:
        format_code_name = colour.ipython_shell().compile.format_code_name
    except Exception:  # not in IPython, or an IPython without cell names
        return None

    def label(path: str) -> str | None:
        try:
            named = format_code_name(path)
        except Exception:
            return None
        return " ".join(named) if named else None

    return label


def render(name: str, summary: str, sections: Iterable[tuple[str, str]]) -> list[str]:
    """The lines IPython shows: our headline, then each (title, text) section the workers produced."""
    lines = [headline(name, summary, colour.wanted())]
    for title, text in sections:
        if text and text.strip():
            lines.append(f"--- {title} ---")
            lines.append(with_cell_names(text.rstrip()))
    if any(has_folds(line) for line in lines):
        lines.append(FOLD_HINT)
    return lines
