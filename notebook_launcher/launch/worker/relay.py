"""Cut a worker off the kernel's sockets and route what it shows to the launcher instead.

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

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Callable
from types import ModuleType
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


def install() -> None:
    """Detach from the kernel and patch what is loaded; patch the rest when it loads."""
    from . import display_relay, progress_relay

    patches: dict[str, Callable[[ModuleType], None]] = {
        "jupyter_client.session": _guard_session,
        "comm": _refuse_widgets,
        "tqdm.std": progress_relay.patch_std,
        "tqdm.notebook": progress_relay.patch_notebook,
        "IPython.core.display_functions": display_relay.patch_display_functions,
        "IPython.core.interactiveshell": display_relay.patch_shell,
    }
    for name, patch in patches.items():
        module = sys.modules.get(name)
        if module is not None:
            patch(module)
    sys.meta_path.insert(0, _PatchOnImport({k: v for k, v in patches.items() if k not in sys.modules}))
    _logging_to_new_streams()


def connect(sink: Sink) -> None:
    """Where relayed messages go from now on (the worker's channel, once it exists)."""
    global _sink
    _sink = sink


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Runs a patch right after a module's code ran, before anyone can use what it defines."""

    def __init__(self, patches: dict[str, Callable[[ModuleType], None]]) -> None:
        self.patches = patches

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        patch = self.patches.pop(fullname, None)
        if patch is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_then_patch(module: ModuleType) -> None:
            run(module)
            patch(module)

        spec.loader.exec_module = exec_then_patch  # type: ignore[method-assign]
        return spec


def _guard_session(module: ModuleType) -> None:
    """Whatever still holds the kernel's Session (a comm, a stale publisher) sends nothing; a Session
    the rank made itself (a notebook run from a rank) works as usual."""
    original = module.Session.send

    def send(self: Any, stream: Any, msg_or_type: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(self, "pid", None) == os.getpid():
            return original(self, stream, msg_or_type, *args, **kwargs)
        kind = msg_or_type if isinstance(msg_or_type, str) else (msg_or_type or {}).get("msg_type", "?")
        tell_once(
            f"session:{kind}",
            f"a {kind!r} message from this rank to the kernel was dropped: a rank cannot use the kernel's "
            "connection. print(), display() and tqdm are relayed to the cell.",
        )

    module.Session.send = send


def _refuse_widgets(module: ModuleType) -> None:
    """A widget's comm would need the kernel's sockets: say so at once instead of hanging."""

    def create_comm(*args: Any, **kwargs: Any) -> Any:
        from ...errors import WorkerWidgetError

        raise WorkerWidgetError(WIDGET_MESSAGE)

    module.create_comm = create_comm
    manager = None

    def get_comm_manager(*args: Any, **kwargs: Any) -> Any:
        nonlocal manager
        if manager is None:  # a local one: registering targets is harmless, nothing is sent
            from comm.base_comm import CommManager

            manager = CommManager()
        return manager

    module.get_comm_manager = get_comm_manager


def _logging_to_new_streams() -> None:
    """Log handlers the kernel made on its own stdout/stderr write to this worker's pipes instead."""
    logging = sys.modules.get("logging")
    if logging is None:
        return
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    for logger in loggers:
        for handler in getattr(logger, "handlers", ()):
            stream = getattr(handler, "stream", None)
            if type(stream).__module__.startswith("ipykernel"):
                name = getattr(stream, "name", "stderr")
                handler.stream = sys.stdout if name == "stdout" else sys.stderr
