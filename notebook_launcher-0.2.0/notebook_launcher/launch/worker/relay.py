"""Route what a worker shows to the launcher: display()/clear_output()/tqdm messages over the
worker's message pipe, in their place among its printed lines (detach.py cuts the worker off the
kernel's sockets and installs the patches that call this).

A forked worker inherits the kernel's shell, display publisher, comm functions and Session: left
alone, a `display()`, a tqdm notebook bar or an ipywidget in the worker makes ipykernel log
"attempted to send message from fork" and the output is lost. Here, before user code runs, the
display publisher, `display()`/`clear_output()`, tqdm and the comm functions of every process the
launcher starts are replaced by a relay over the worker's message pipe (the kernel shows what it
gets: output.py), and any direct send on the kernel's Session is dropped with one clear line.
Modules imported later (a spawned worker, `import tqdm` inside the function) are patched when they
load. Imports nothing heavy: only what the kernel already imported is touched.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

Sink = Callable[[str, dict[str, Any]], None]

_sink: Sink | None = None
_seq = 0
DISPLAY_MARK = "\x1enotebook_launcher display "  # starts a line no program prints (record separator)
ORDERED = ("display", "clear")
_told: set[str] = set()

WIDGET_MESSAGE = (
    "ipywidgets cannot be created on a rank: a worker process is not the kernel and has no connection "
    "to the notebook's page. From a rank, print(), tqdm progress bars (tqdm, tqdm.auto, tqdm.notebook) "
    "and IPython.display.display() (HTML, Markdown, images, matplotlib figures, DataFrames, "
    "clear_output, display_id updates) reach the cell. Create widgets in the notebook instead, e.g. "
    "notebook_launch(..., view=True) for a live view of the run."
)


def send(kind: str, payload: dict[str, Any]) -> None:
    """Hand one display/progress message to the launcher; never raises into user code."""
    if _sink is None:
        return
    for stream in (sys.stdout, sys.stderr):  # what was printed before comes first in the cell
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass
    if kind in ORDERED:
        payload = dict(payload, seq=_place_mark())
    try:
        _sink(kind, payload)
    except Exception as exc:  # noqa: BLE001 - a lost bar update must not stop training
        tell_once(f"send:{kind}", f"a {kind} message could not be sent to the notebook ({exc})")


def _place_mark() -> int:
    """A numbered line in fd 1 where the display belongs among the printed lines: the launcher
    shows the display when it reads that line (the message pipe and stdout are read separately)."""
    global _seq
    _seq += 1
    try:
        os.write(1, f"{DISPLAY_MARK}{_seq}\n".encode())
    except OSError:
        pass
    return _seq


def tell_once(key: str, text: str) -> None:
    if key not in _told:
        _told.add(key)
        print(f"notebook_launcher: {text}", file=sys.stderr, flush=True)


def connect(sink: Sink) -> None:
    """Where relayed messages go from now on (the worker's channel, once it exists)."""
    global _sink
    _sink = sink
