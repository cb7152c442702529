"""ChoiceButtons: one-of-N toggle buttons where single choices can be disabled with a reason.

ipywidgets' ToggleButtons and Dropdown cannot disable one option, and the panel must show
unsupported precisions as visible-but-disabled with the reason. Each choice here is a real
ToggleButton (disabled ones carry the reason as tooltip), and the reasons are listed below.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

import ipywidgets as widgets
import traitlets

from ...errors import ConfigError


class ChoiceButtons(widgets.VBox):
    """Radio-like buttons; `value` is the selected choice's value (observable with `observe`).

    A disabled choice cannot be clicked, but code (or a loaded config) may still set it; the
    panel then reports the reason next to the field instead of silently changing the value.
    """

    value = traitlets.Any(allow_none=True)

    def __init__(
        self,
        options: Sequence[tuple[str, Any]],
        *,
        value: Any = None,
        description: str = "",
        disabled: Mapping[Any, str] | None = None,
        tooltips: Mapping[Any, str] | None = None,
    ) -> None:
        self._options = list(options)
        self._reasons = dict(disabled or {})
        tooltips = dict(tooltips or {})
        self.buttons: dict[Any, widgets.ToggleButton] = {}
        for label, choice in self._options:
            reason = self._reasons.get(choice)
            button = widgets.ToggleButton(
                description=label,
                disabled=reason is not None,
                tooltip=reason or tooltips.get(choice, label),
                layout=widgets.Layout(width="auto"),
            )
            button.add_class("nl-choice")
            button.observe(self._clicked(choice), names="value")
            self.buttons[choice] = button
        self.reasons = widgets.HTML(self._reasons_html())
        row = [widgets.Label(description, layout=widgets.Layout(width="150px"))] if description else []
        super().__init__([widgets.HBox(row + list(self.buttons.values())), self.reasons])
        self.value = value if value is not None or None in self.buttons else self._options[0][1]

    @property
    def choices(self) -> list[Any]:
        return [choice for _, choice in self._options]

    def is_enabled(self, choice: Any) -> bool:
        return choice in self.buttons and choice not in self._reasons

    def reason(self, choice: Any) -> str | None:
        """Why `choice` is disabled, or None when it can be picked."""
        return self._reasons.get(choice)

    @traitlets.validate("value")
    def _check_value(self, proposal: Any) -> Any:
        choice = proposal["value"]
        if choice not in self.buttons:
            shown = ", ".join(repr(c) for c in self.choices)
            raise ConfigError(f"{choice!r} is not one of the choices ({shown}).")
        return choice

    @traitlets.observe("value")
    def _show_value(self, change: Any) -> None:
        for choice, button in self.buttons.items():
            button.value = choice == change["new"]
            button.button_style = "info" if choice == change["new"] else ""

    def _clicked(self, choice: Any) -> Any:
        def handler(change: Any) -> None:
            if change["new"] and self.value != choice:
                self.value = choice
            elif not change["new"] and self.value == choice:
                self.buttons[choice].value = True  # a radio choice cannot be switched off

        return handler

    def _reasons_html(self) -> str:
        if not self._reasons:
            return ""
        items = "; ".join(f"<b>{html.escape(str(c))}</b>: {html.escape(r)}" for c, r in self._reasons.items())
        return f'<span class="nl-disabled-reasons" style="color:#777;font-size:90%">{items}</span>'
