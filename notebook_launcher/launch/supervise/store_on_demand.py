"""The rendezvous store of a notebook launch, hosted on demand: the port is the launch's from the
start, and torch's TCPStore is made on it only when a connection arrives, once the ranks have been
forked. On one machine that is a rank's own init_process_group (why: system/store.py); over several
machines the first rank or machine that connects (why: launch/planning.py). The supervisor's select
loop watches it and hosts or closes it."""

from __future__ import annotations

import socket
from typing import Any

from ...system.store import listening_socket, store_on_socket


class StoreOnDemand:
    """A listening socket whose TCPStore is hosted only when something connects: the launch's loop
    watches fileno() and calls host(). Until then no TCPStore exists, so no lookup and no server
    thread (see above); the port is this launch's from the start, and close() frees it."""

    def __init__(self, bind: str, port: int, timeout_s: float) -> None:
        self._sock: socket.socket | None = listening_socket(bind, port)
        self._bind, self._timeout_s = bind, timeout_s
        self.port: int = self._sock.getsockname()[1]
        self.store: Any = None

    def fileno(self) -> int:
        return self._sock.fileno() if self._sock is not None else -1

    def host(self) -> None:
        """Host the TCPStore on the socket (a rank is waiting in its queue)."""
        if self._sock is not None:
            sock, self._sock = self._sock, None
            try:
                self.store = store_on_socket(sock, self._bind, self._timeout_s)
            except BaseException:
                sock.close()
                raise

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self.store = None

    def __del__(self) -> None:
        self.close()
