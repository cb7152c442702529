"""Where `view=True` gets its live view: the public face hands in a factory, the launcher calls it.

The launcher never imports the widgets (the arrow is widgets -> launch); the public face
(`notebook_launcher/__init__.py`) registers a factory that builds a RunView and shows it in the cell.
Tiny and import-free on purpose: the public face imports it without loading the launcher or torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .errors import ConfigError

ViewFactory = Callable[[], Any]
_factory: ViewFactory | None = None


def set_view_factory(factory: ViewFactory | None) -> None:
    """Make `factory()` the live view `notebook_launch(..., view=True)` shows (None: no views)."""
    global _factory
    _factory = factory


def displayed_view(view: Any) -> Any:
    """The view that view= asks for: a new one from the factory (True), or the caller's own."""
    if view is not True:
        return view
    if _factory is None:
        raise ConfigError(
            "view=True needs a view factory; `import notebook_launcher` registers the RunView's "
            "(or pass a RunView as view=)."
        )
    return _factory()
