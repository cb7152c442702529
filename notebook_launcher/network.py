"""Ports on this machine: whether one is free, and a free one.

Shared by the notebook launcher and the CLI, which both host or pick a rendezvous port.
"""

from __future__ import annotations

import socket


def port_is_free(port: int, host: str = "") -> bool:
    """Whether a server could listen on `port` at `host` ("" = all interfaces, as TCPStore binds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port that is free right now (the caller should bind it soon: another program may take it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])
