"""`display()`, `clear_output()` and `display_id` updates from a worker, relayed to the cell.

In a forked worker the kernel's shell is still there (its formatters know matplotlib figures once
the inline backend is on): only its display publisher is swapped for the relay. A spawned worker
has no shell: `IPython.core.display_functions.display` and `clear_output` are replaced by versions
that format with a plain DisplayFormatter (plus PNG for matplotlib figures) and send the same way.
"""

from __future__ import annotations

import base64
import sys
import uuid
from types import ModuleType
from typing import Any

from . import relay

DISPLAY, CLEAR = "display", "clear"


def publish(
    data: dict[str, Any],
    metadata: dict[str, Any] | None = None,
    transient: dict[str, Any] | None = None,
    update: bool = False,
) -> None:
    """One display message: the mimebundle (bytes as base64, as Jupyter sends them), its display id."""
    bundle = {mime: _jsonable(mime, value) for mime, value in (data or {}).items()}
    display_id = (transient or {}).get("display_id")
    relay.send(
        DISPLAY,
        {"data": bundle, "metadata": dict(metadata or {}), "display_id": display_id, "update": update},
    )


def clear(wait: bool = False) -> None:
    relay.send(CLEAR, {"wait": bool(wait)})


def _jsonable(mime: str, value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        if mime.startswith("image/") and mime != "image/svg+xml":
            return base64.b64encode(bytes(value)).decode("ascii")
        return bytes(value).decode("utf-8", errors="replace")
    return value


def patch_shell(module: ModuleType) -> None:
    """The forked kernel's shell keeps formatting; its publisher now writes to the relay."""
    shell = getattr(module.InteractiveShell, "_instance", None)
    if shell is None:
        return
    from IPython.core.displaypub import DisplayPublisher

    class RelayPublisher(DisplayPublisher):
        def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kwargs):
            publish(data, metadata, transient, update)

        def clear_output(self, wait=False):
            clear(wait)

    shell.display_pub = RelayPublisher()


def _shell_formats() -> bool:
    """Whether a live IPython shell (a forked kernel's) formats displays: then its own path reaches
    the relay publisher (patch_shell). Asked at call time, never while IPython imports itself."""
    shell_module = sys.modules.get("IPython.core.interactiveshell")
    shell_class = getattr(shell_module, "InteractiveShell", None)
    return shell_class is not None and shell_class.initialized()


def patch_display_functions(module: ModuleType) -> None:
    """Without a shell (spawn, the warm pool, a plain script), display() would print a repr: send
    the rich bundle instead. Runs right after `IPython.core.display_functions` loaded, which on
    IPython 9 is while `IPython.core.interactiveshell` is still half imported: so this touches no
    other module here, and the replacement decides at each call whether a shell formats instead."""
    original_display = module.display
    original_clear_output = module.clear_output

    def relay_display(
        *objs: Any,
        include: Any = None,
        exclude: Any = None,
        metadata: dict[str, Any] | None = None,
        transient: dict[str, Any] | None = None,
        display_id: Any = None,
        raw: bool = False,
        clear: bool = False,
        **kwargs: Any,
    ) -> Any:
        transient = dict(transient or {})
        if display_id:
            transient["display_id"] = uuid.uuid4().hex if display_id is True else display_id
        if kwargs.get("update") and "display_id" not in transient:
            raise TypeError("display_id required for update_display")
        if not objs and display_id:
            objs, raw = ({},), True
        if clear:
            clear_output(wait=True)
        for obj in objs:
            if raw:
                data, md = obj, {}
            else:
                data, md = _formatter().format(obj, include=include, exclude=exclude)
            if data:
                publish(data, {**md, **(metadata or {})}, transient, bool(kwargs.get("update")))
        if display_id:
            return module.DisplayHandle(transient["display_id"])
        return None

    def display(*objs: Any, **kwargs: Any) -> Any:
        """IPython's display() where a live shell formats; else the relay's own formatting."""
        return (original_display if _shell_formats() else relay_display)(*objs, **kwargs)

    def clear_output(wait: bool = False) -> None:
        if _shell_formats():
            original_clear_output(wait=wait)
        else:
            clear(wait)

    display.__doc__ = original_display.__doc__
    # a module's attributes are its __dict__ (typeshed's ModuleType declares reading them only)
    vars(module).update(display=display, clear_output=clear_output)


_formatter_instance: Any = None


def _formatter() -> Any:
    """IPython's formatters (every `_repr_*_`, `_repr_mimebundle_`), plus PNG for matplotlib figures."""
    global _formatter_instance
    if _formatter_instance is None:
        from IPython.core.formatters import DisplayFormatter

        _formatter_instance = DisplayFormatter()
    figure = sys.modules.get("matplotlib.figure")
    if figure is not None:
        _formatter_instance.formatters["image/png"].for_type(figure.Figure, _figure_png)
    return _formatter_instance


def _figure_png(fig: Any) -> bytes:
    from io import BytesIO

    buffer = BytesIO()
    fig.canvas.print_figure(buffer, format="png", bbox_inches="tight")
    return buffer.getvalue()
