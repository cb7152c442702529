"""Cut a worker off the kernel's sockets before user code runs (relay.py carries what it shows).

A forked worker inherits the kernel's shell, display publisher, comm functions and Session: left
alone, a `display()`, a tqdm notebook bar or an ipywidget in the worker makes ipykernel log
"attempted to send message from fork" and the output is lost. Here the display publisher,
`display()`/`clear_output()` (display_relay.py), tqdm (progress_relay.py) and the comm functions
of every process the launcher starts are replaced, and any direct send on the kernel's Session is
dropped with one clear line. Modules imported later (a spawned worker, `import tqdm` inside the
function) are patched when they load. Imports nothing heavy: only what is loaded is touched.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from . import display_relay, progress_relay
from .relay import WIDGET_MESSAGE, tell_once


def install() -> None:
    """Detach from the kernel and patch what is loaded; patch the rest when it loads."""
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
            _apply(name, patch, module)
    sys.meta_path.insert(0, _PatchOnImport({k: v for k, v in patches.items() if k not in sys.modules}))
    _logging_to_new_streams()


def _apply(name: str, patch: Callable[[ModuleType], None], module: ModuleType) -> None:
    """A patch that fails (a library release we do not know) leaves that library as it is and says
    so once: the user's import and function go on; only the relay of that library is lost."""
    try:
        patch(module)
    except Exception as exc:  # noqa: BLE001 - the user's import must not fail because of the relay
        tell_once(
            f"patch:{name}",
            f"what {name} shows is not relayed to the cell ({type(exc).__name__}: {exc}); "
            "please report this with your IPython/tqdm versions",
        )


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
            _apply(fullname, patch, module)

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

    manager = None

    def get_comm_manager(*args: Any, **kwargs: Any) -> Any:
        nonlocal manager
        if manager is None:  # a local one: registering targets is harmless, nothing is sent
            from comm.base_comm import CommManager

            manager = CommManager()
        return manager

    # a module's attributes are its __dict__ (typeshed's ModuleType declares reading them only)
    vars(module).update(create_comm=create_comm, get_comm_manager=get_comm_manager)


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
