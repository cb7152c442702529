"""Notebook widgets (ipywidgets only): ConfigPanel builds a LaunchConfig by pointing and clicking;
RunView shows a launch live.

Imports config, hardware and launch. Imported lazily, and only by the public face, interactive and
launch's view= option, so workers and the CLI never need ipywidgets."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .panel.config_panel import ConfigPanel
    from .view.run_view import RunView

__all__ = ["ConfigPanel", "RunView"]


def __getattr__(name: str) -> Any:
    if name == "ConfigPanel":
        from .panel.config_panel import ConfigPanel

        return ConfigPanel
    if name == "RunView":
        from .view.run_view import RunView

        return RunView
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
