"""What each of the tests' Jupyter kernels shares with nothing else: its sockets and its temp directory.

Sockets: jupyter_client picks a kernel's five TCP ports by binding port 0 and closing the socket; the
kernel binds them a second later. In between, any process on the machine may be given one of them
(this suite binds ephemeral ports all the time: TCPStores, gloo, servers), and the kernel dies at
start with "ZMQError: Address already in use" (seen in test_widgets_kernel_pump, full run O3 of
2026-12-06). So every kernel listens on ZMQ ipc sockets: files under a directory that mkdtemp made
for this process, which nobody else can take, with a prefix of each kernel's own.

Temp directory: the tests end most kernels with SIGKILL (shutdown_kernel(now=True)), so what a
kernel and its workers put in the temp directory (multiprocessing's pymp-* directories, the files
of the code under test) stayed in /tmp after every run. Each kernel gets TMPDIR of its own, removed
when the test closes the kernel (and at this process's exit).

Imported by tests/installed_smoke.py too (it runs as a script beside this file, in the fresh venv).
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from typing import Any


@functools.cache
def _private() -> str:
    """This process's directory for its kernels, made at the first kernel (a process that only
    imports this module makes none), removed at exit."""
    directory = tempfile.mkdtemp(prefix="nl-kernels-")
    atexit.register(shutil.rmtree, directory, True)
    return directory


def ipc_traits() -> dict[str, str]:
    """KernelManager traits for one new kernel: ipc transport, sockets `<private dir>/<id>-<n>`
    (an absolute path, so the kernel and its client agree whatever their working directories)."""
    return {"transport": "ipc", "ip": f"{_private()}/{uuid.uuid4().hex[:12]}"}


def _new_temp_dir() -> str:
    """A fresh directory for one kernel's TMPDIR (remove it with shutil.rmtree when the kernel is gone)."""
    return tempfile.mkdtemp(prefix="tmp-", dir=_private())


def _environment_with_temp_dir(temp_dir: str) -> dict[str, str]:
    """This process's environment with TMPDIR=temp_dir, for the kernel's start_kernel(env=...)."""
    return {**os.environ, "TMPDIR": temp_dir}


@dataclass
class IsolatedKernel:
    """A started kernel (`km`), its ready client (`kc`) and its temp directory."""

    km: Any
    kc: Any
    temp_dir: str

    def close(self) -> None:
        """Kill the kernel (as the tests always have: no graceful exit to wait for), remove its TMPDIR."""
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def start_kernel(cwd: str | None = None, ready_timeout: float = 60, **start_options: Any) -> IsolatedKernel:
    """A python3 kernel on ipc sockets with a TMPDIR of its own, started in cwd, its client ready."""
    from jupyter_client.manager import KernelManager

    km = KernelManager(kernel_name="python3", **ipc_traits())
    temp_dir = _new_temp_dir()
    km.start_kernel(cwd=cwd, env=_environment_with_temp_dir(temp_dir), **start_options)
    kc = km.client()
    kc.start_channels()
    kernel = IsolatedKernel(km, kc, temp_dir)
    try:
        kc.wait_for_ready(timeout=ready_timeout)
    except BaseException:
        kernel.close()
        raise
    return kernel


def run_notebook(nb: Any, cwd: str, **options: Any) -> Any:
    """Run every cell of `nb` (nbformat 4) in a fresh python3 kernel started in cwd, on ipc sockets
    and with a TMPDIR of its own (nbclient's NotebookClient; `options` are its own, e.g. timeout,
    allow_errors); the client, its outputs in `nb`."""
    from nbclient import NotebookClient
    from traitlets.config import Config

    config = Config()  # the KernelManager the client makes reads its traits from here
    for name, value in ipc_traits().items():
        setattr(config.KernelManager, name, value)
    client = NotebookClient(
        nb, kernel_name="python3", resources={"metadata": {"path": cwd}}, config=config, **options
    )
    temp_dir = _new_temp_dir()
    try:
        client.execute(env=_environment_with_temp_dir(temp_dir))
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)
    return client


# For a Jupyter server's own kernels (browser tests): the server names each kernel's sockets after
# its connection file in the runtime directory, which must then be short (a socket path is at most
# 107 bytes on Linux).
SERVER_ARGUMENTS = ["--KernelManager.transport=ipc"]
