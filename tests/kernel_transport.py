"""The tests' Jupyter kernels talk over ZMQ ipc sockets in a directory of this process, not TCP ports.

jupyter_client picks a kernel's five TCP ports by binding port 0 and closing the socket; the kernel
binds them a second later. In between, any process on the machine may be given one of them (this
suite binds ephemeral ports all the time: TCPStores, gloo, servers), and the kernel dies at start with
"ZMQError: Address already in use" (seen in test_widgets_kernel_pump, full run O3 of 2026-12-06).
Socket files under a directory that mkdtemp made for this process cannot be taken by anyone else, and
each kernel gets a prefix of its own in it, so no two kernels meet either.

Imported by tests/installed_smoke.py too (it runs as a script beside this file, in the fresh venv).
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import uuid
from typing import Any

_SOCKETS = tempfile.mkdtemp(prefix="nl-kernels-")
atexit.register(shutil.rmtree, _SOCKETS, True)


def ipc_traits() -> dict[str, str]:
    """KernelManager traits for one new kernel: ipc transport, sockets `<private dir>/<id>-<n>`
    (an absolute path, so the kernel and its client agree whatever their working directories)."""
    return {"transport": "ipc", "ip": f"{_SOCKETS}/{uuid.uuid4().hex[:12]}"}


def ipc_kernel_manager(**traits: Any) -> Any:
    """A python3 KernelManager (not started) whose kernel will listen on ipc sockets."""
    from jupyter_client.manager import KernelManager

    return KernelManager(kernel_name="python3", **ipc_traits(), **traits)


def ipc_config() -> Any:
    """traitlets Config for a NotebookClient: the kernel it starts listens on ipc sockets."""
    from traitlets.config import Config

    config = Config()
    for name, value in ipc_traits().items():
        setattr(config.KernelManager, name, value)
    return config


# For a Jupyter server's own kernels (browser tests): the server names each kernel's sockets after
# its connection file in the runtime directory, which must then be short (a socket path is at most
# 107 bytes on Linux).
SERVER_ARGUMENTS = ["--KernelManager.transport=ipc"]
