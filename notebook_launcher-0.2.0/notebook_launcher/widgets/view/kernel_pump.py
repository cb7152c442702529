"""Handle widget (comm) messages while a notebook cell blocks, so a Stop button still works.

A blocking `notebook_launch(...)` keeps the kernel's main thread busy, and the kernel only reads
the next shell message when the cell returns: a click on Stop would wait for the very run it is
meant to stop. `CommPump.pump()` is called every ~50 ms from the blocked cell (a launch poll hook);
it reads the shell messages queued for the main thread, handles comm messages (widget clicks,
value changes) at once, and hands every other message (the next cell's execute_request, ...) back
to the kernel's event loop in arrival order, so they run after the cell as usual.

Supported: ipykernel 7 (tested with 7.4). Elsewhere `CommPump.available` is False with a reason,
and a blocking launch can still be stopped by interrupting the kernel.
"""

from __future__ import annotations

import inspect
import logging
import threading
from typing import Any

log = logging.getLogger(__name__)

COMM_TYPES = frozenset({"comm_open", "comm_msg", "comm_close"})


def _running_kernel() -> Any:
    """The ipykernel Kernel of this process, or None outside a kernel."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    return getattr(shell, "kernel", None) if shell is not None else None


class CommPump:
    """Dispatch pending comm messages from inside a blocked cell (main thread only)."""

    def __init__(self, kernel: Any = None) -> None:
        self.kernel = kernel if kernel is not None else _running_kernel()
        self.reason: str | None = None
        self._socket: Any = None
        self._reply_stream: Any = None
        self._find_socket()

    @property
    def available(self) -> bool:
        return self.reason is None

    def _find_socket(self) -> None:
        kernel = self.kernel
        if kernel is None:
            self.reason = "not running inside a Jupyter kernel"
            return
        if not hasattr(kernel, "shell_main") or not hasattr(kernel, "shell_handlers"):
            self.reason = (
                f"widget clicks during a blocking launch need ipykernel 7 or newer "
                f"(this kernel is {type(kernel).__name__}); interrupt the kernel to stop instead"
            )
            return
        channel_thread = getattr(kernel, "shell_channel_thread", None)
        try:
            if channel_thread is not None:
                manager = channel_thread.manager
                self._socket = manager._shell_channel_to_main.to_socket
                self._reply_stream = manager.get_subshell_to_shell_channel_socket(None)
            else:
                self._socket = kernel.shell_stream.socket
                self._reply_stream = kernel.shell_stream
        except AttributeError as exc:
            self.reason = f"this ipykernel's internals are not the ones CommPump knows ({exc})"

    def pump(self, limit: int = 50) -> int:
        """Handle up to `limit` queued shell messages; returns how many comm messages ran."""
        if not self.available or threading.current_thread() is not threading.main_thread():
            return 0
        import zmq

        handled = 0
        for _ in range(limit):
            try:
                frames = self._socket.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            except zmq.ZMQError as exc:  # socket closed: the kernel is shutting down
                log.debug("CommPump stops: %s", exc)
                self.reason = f"kernel socket unavailable ({exc})"
                break
            if self._is_comm(frames):
                self._dispatch(frames)
                handled += 1
            else:
                self._defer(frames)
        return handled

    def _is_comm(self, frames: list[Any]) -> bool:
        session = self.kernel.session
        try:
            _, rest = session.feed_identities(frames, copy=False)
            header = session.deserialize(rest, content=False, copy=False)["header"]
        except Exception:  # malformed: let the kernel's own loop report it later
            return False
        # JupyterLab 4.6 tags widget messages with its own subshell id; the kernel still routes a
        # comm's messages to the thread that opened it (here: main), so they are ours to handle.
        return header.get("msg_type") in COMM_TYPES

    def _dispatch(self, frames: list[Any]) -> None:
        session = self.kernel.session
        idents, rest = session.feed_identities(frames, copy=False)
        msg = session.deserialize(rest, content=True, copy=False)
        handler = self.kernel.shell_handlers.get(msg["header"]["msg_type"])
        if handler is None:
            return
        try:
            result = handler(self._reply_stream, idents, msg)
            if inspect.isawaitable(result):
                _run_to_completion(result)
        except Exception:
            log.exception("widget message handler failed while a launch was running")

    def _defer(self, frames: list[Any]) -> None:
        """Give a non-comm message back to the kernel loop; it runs after the current cell."""
        self.kernel.io_loop.add_callback(self.kernel.shell_main, None, frames)


def _run_to_completion(awaitable: Any) -> None:
    """Drive a coroutine that never really suspends (comm handlers); refuse one that does."""
    coro = awaitable.__await__()
    try:
        coro.send(None)
    except StopIteration:
        return
    # A comm handler that awaits real I/O cannot finish while the cell blocks.
    coro.close()
    log.warning("a comm handler awaited during a blocking launch and was cancelled")
