"""The public notebook_launch: the launcher plus, on request, a live RunView in the cell.

Lives apart from launch/notebook.py so the launcher itself never imports widgets (the arrow goes
widgets -> launch); the view is imported only when `view=` asks for it.
"""

from __future__ import annotations

import functools
from typing import Any

from .notebook import notebook_launch as _notebook_launch
from .result import LaunchResult


@functools.wraps(_notebook_launch)
def notebook_launch(
    fn: Any, args: Any = (), kwargs: Any = None, *, view: Any = False, **options: Any
) -> LaunchResult:
    if not view:
        return _notebook_launch(fn, args, kwargs, **options)
    if view is True:
        from IPython.display import display

        from ..widgets import RunView

        view = RunView()
        display(view)
    options["observers"] = [*options.get("observers", ()), view]
    options["poll_hooks"] = [*options.get("poll_hooks", ()), view.poll]
    options.setdefault("quiet", True)
    return _notebook_launch(fn, args, kwargs, **options)


notebook_launch.__doc__ = (_notebook_launch.__doc__ or "") + (
    "\n    view=True shows a live RunView (per-rank output, progress, metrics chart, Stop button) instead of "
    "printing lines;\n    pass a RunView instance to reuse one.\n"
)
