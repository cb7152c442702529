"""tqdm in a worker (tqdm, tqdm.auto, tqdm.notebook) sends its state to the cell's progress bars.

Every bar, whichever flavour, draws through `tqdm.std.tqdm.display`: that method is replaced by
one that sends the bar's numbers (at most every BAR_INTERVAL seconds, and always the last state on
close), and the bar writes nothing to the worker's stderr. The notebook flavour would build an
ipywidget, which needs the kernel's sockets: it is turned back into the plain class with the relay.
"""

from __future__ import annotations

import time
from types import ModuleType
from typing import Any

from . import relay

BAR = "bar"
BAR_INTERVAL = 0.1  # seconds between two updates of one bar (tqdm's own mininterval is also 0.1)
_STATS = "{n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}{postfix}]"
_STATS_NO_TOTAL = "{n_fmt} [{elapsed}, {rate_fmt}{postfix}]"


class _Discard:
    """The bar's file: its text form goes nowhere (the cell draws the bar from the numbers)."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


def send_bar(bar: Any, closed: bool = False) -> None:
    now = time.monotonic()
    if not closed and now - getattr(bar, "_relay_sent", 0.0) < BAR_INTERVAL:
        return
    bar._relay_sent = now
    try:
        info = dict(bar.format_dict)
        total = info.get("total")
        info["bar_format"] = _STATS if total else _STATS_NO_TOTAL
        info["ncols"] = None
        stats = bar.format_meter(**info)
        text = bar.format_meter(**dict(bar.format_dict, ncols=60))
    except Exception:  # noqa: BLE001 - a bar that cannot format itself still counts
        stats = text = f"{getattr(bar, 'n', 0)}/{getattr(bar, 'total', '?')}"
    relay.send(
        BAR,
        {
            "bar": id(bar),
            "desc": str(getattr(bar, "desc", "") or "").rstrip(": "),
            "n": getattr(bar, "n", 0),
            "total": getattr(bar, "total", None),
            "stats": stats,
            "text": text,
            "closed": closed,
            "leave": getattr(bar, "leave", True) is not False,
        },
    )


def patch_std(module: ModuleType) -> None:
    cls = module.tqdm
    if getattr(cls, "_relayed", False):
        return
    original_init, original_close = cls.__init__, cls.close

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        self.fp = _Discard()

    def display(self: Any, msg: str | None = None, pos: int | None = None) -> bool:
        if msg is None or msg:  # msg="" is tqdm clearing the line: nothing to send
            send_bar(self)
        return True

    def close(self: Any) -> None:
        was_open = not getattr(self, "disable", True)
        original_close(self)
        if was_open:
            send_bar(self, closed=True)

    cls.__init__, cls.display, cls.close, cls._relayed = __init__, display, close, True


def patch_notebook(module: ModuleType) -> None:
    """tqdm.notebook's class behaves as the (relayed) plain one: no widget, same bar in the cell."""
    cls = getattr(module, "tqdm_notebook", None)
    if cls is None or getattr(cls, "_relayed_notebook", False):
        return
    base = cls.__mro__[1]
    patch_std(__import__(base.__module__, fromlist=["tqdm"]))

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs.pop("display", None)
        base.__init__(self, *args, **kwargs)
        self.disp = lambda *a, **k: None  # what the notebook class's own helpers call

    notebook_only = (
        "display",
        "close",
        "clear",
        "reset",
        "__iter__",
        "update",
        "status_printer",
        "_repr_pretty_",
        "_json_",
    )
    for name in (*notebook_only, "__repr__"):
        if name in cls.__dict__:
            delattr(cls, name)
    cls.__init__ = __init__
    cls._relayed_notebook = True
