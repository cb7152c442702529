"""Where the cell printer draws: a Jupyter kernel's cell (streams plus display outputs that update in
place) or a plain terminal (text only; what updates in place in a notebook is printed once, at the
end). Only this module talks to IPython's display machinery on the launcher's side."""

from __future__ import annotations

import sys
from typing import Any


def in_kernel() -> bool:
    """True when this process is a Jupyter kernel that can show display outputs."""
    shell_module = sys.modules.get("IPython.core.interactiveshell")
    if shell_module is None or not shell_module.InteractiveShell.initialized():
        return False
    return getattr(shell_module.InteractiveShell.instance(), "kernel", None) is not None


class TextSurface:
    """stdout/stderr only."""

    live = False

    def write(self, stream: str, text: str) -> None:
        (sys.stdout if stream == "stdout" else sys.stderr).write(text)

    def flush(self) -> None:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()

    def show(self, key: str, bundle: dict[str, Any], final: bool = False) -> None:
        """An output that updates in place: in a terminal, only its last state, once."""
        text = bundle.get("text/plain", "")
        if final and text:
            self.write("stderr", text.rstrip("\n") + "\n")
            self.flush()

    def publish(
        self, data: dict[str, Any], metadata: dict[str, Any], display_id: str | None, update: bool
    ) -> None:
        if not update and data.get("text/plain"):
            self.write("stdout", str(data["text/plain"]).rstrip("\n") + "\n")
            self.flush()

    def clear(self, wait: bool) -> None:
        pass

    def forget(self) -> None:
        pass


class NotebookSurface(TextSurface):
    """The running cell of this kernel: display outputs with ids, updated in place."""

    live = True

    def __init__(self) -> None:
        self._shown: set[str] = set()

    def show(self, key: str, bundle: dict[str, Any], final: bool = False) -> None:
        self.publish(bundle, {}, key, key in self._shown)

    def publish(
        self, data: dict[str, Any], metadata: dict[str, Any], display_id: str | None, update: bool
    ) -> None:
        from IPython.display import publish_display_data

        self.flush()  # the lines printed before come first
        if display_id is None:
            publish_display_data(data, metadata)
            return
        update = update and display_id in self._shown
        self._shown.add(display_id)
        publish_display_data(data, metadata, transient={"display_id": display_id}, update=update)

    def clear(self, wait: bool) -> None:
        from IPython.display import clear_output

        self.flush()
        clear_output(wait=wait)
        self.forget()  # what was cleared is shown anew when it next changes

    def forget(self) -> None:
        self._shown.clear()


def cell_surface() -> TextSurface:
    return NotebookSurface() if in_kernel() else TextSurface()
