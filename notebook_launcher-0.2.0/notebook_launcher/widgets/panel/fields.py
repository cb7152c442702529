"""One labelled panel field with a message slot beside it, and the parsers for text inputs.

Every field is keyed by its LaunchConfig path ("num_processes", "fsdp_config.zero_stage", ...), so
a ConfigError naming that path lands next to the widget that set it.
"""

from __future__ import annotations

import html
import re
from typing import Any

import ipywidgets as widgets

from ...errors import ConfigError

LABEL_WIDTH = "150px"
_KEY_IN_MESSAGE = re.compile(r"^(?:Unknown key '?)?([a-z_]+(?:\.[a-z_0-9]+)?)")


class Field:
    """A widget with its label and a slot for an error (red) or a warning (orange)."""

    def __init__(self, key: str, label: str, widget: widgets.Widget, *, help: str = "") -> None:
        self.key = key
        self.widget = widget
        self.message = widgets.HTML("", layout=widgets.Layout(margin="0 0 0 8px"))
        self.message.add_class("nl-field-message")
        caption = widgets.Label(label, layout=widgets.Layout(width=LABEL_WIDTH), tooltip=help or label)
        self.box = widgets.HBox([caption, widget, self.message])
        self.box.add_class(f"nl-field-{key.replace('.', '-').replace('_', '-')}")

    def show(self, error: str | None = None, warning: str | None = None) -> None:
        """Show the error (or else the warning) beside the field; nothing clears it."""
        if error:
            self.message.value = f'<span class="nl-error" style="color:#c62828">✖ {html.escape(error)}</span>'
        elif warning:
            self.message.value = (
                f'<span class="nl-warning" style="color:#ef6c00">⚠ {html.escape(warning)}</span>'
            )
        else:
            self.message.value = ""


def parse_optional_int(text: str, key: str, *, empty_means: str) -> int | None:
    """'' -> None, '42' -> 42, anything else a ConfigError naming the key and the fix."""
    text = text.strip()
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise ConfigError(
            f"{key}={text!r} is not a whole number; leave it empty for {empty_means}."
        ) from None


def parse_optional_float(text: str, key: str, *, empty_means: str) -> float | None:
    """'' -> None, '1.0' -> 1.0, anything else a ConfigError naming the key and the fix."""
    text = text.strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"{key}={text!r} is not a number; leave it empty for {empty_means}.") from None


def key_of_error(message: str) -> str | None:
    """The config path a ConfigError message starts with ('fsdp_config.x=...' -> 'fsdp_config.x')."""
    match = _KEY_IN_MESSAGE.match(message)
    return match.group(1) if match else None


def text_value(value: Any) -> str:
    """How an optional setting is shown in a text box: None as ''."""
    return "" if value is None else str(value)
