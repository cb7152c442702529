"""The rendezvous store this machine hosts (torch's TCPStore): where it listens, and hosting it there.

On one machine it listens on loopback only; over several machines on the address the others were
given for machine 0. Shared by the notebook launcher (launch/planning.py) and the CLI
(cli/torchrun.py). torch is imported only when a store is hosted.
"""

from __future__ import annotations

import socket
from typing import Any

LOOPBACK = "127.0.0.1"
ALL_INTERFACES = ""


def store_bind_address(main_process_ip: str | None, num_machines: int) -> str:
    """Where this machine's rendezvous store listens.

    One machine: loopback only; nothing outside this machine needs to reach the store, so nothing
    outside can. Several machines: the address the others were given for machine 0, when it is one
    of this machine's own; when it is not (a NAT's public address, a DNS alias of a load balancer),
    connections to it arrive on some local interface we cannot name, so all interfaces.
    """
    if num_machines <= 1:
        return LOOPBACK
    if main_process_ip and is_local_address(main_process_ip):
        return main_process_ip
    return ALL_INTERFACES


def is_local_address(host: str) -> bool:
    """Whether a server on this machine can listen on `host` (an address or name of this machine)."""
    try:
        infos = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)
    except OSError:
        return False
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as sock:
            try:
                sock.bind(address)
                return True
            except OSError:
                continue
    return False


def host_store(bind: str, port: int, *, timeout_s: float, multi_tenant: bool = False) -> Any:
    """Host torch's TCPStore (the rendezvous every rank connects to) listening on `bind` only.

    TCPStore itself always listens on all interfaces, whatever host it is given; a socket bound
    here and handed over as `master_listen_fd` makes it listen where we say. With multi_tenant,
    any TCPStore this process later creates on the same port (torchrun's agent) shares this server.
    Raises OSError when the port cannot be had there.
    """
    import datetime

    from torch.distributed import TCPStore

    timeout = datetime.timedelta(seconds=timeout_s)
    if bind == ALL_INTERFACES:
        return TCPStore(
            LOOPBACK, port, is_master=True, wait_for_workers=False, multi_tenant=multi_tenant, timeout=timeout
        )
    family, kind, proto, _, address = socket.getaddrinfo(bind, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(socket.SOMAXCONN)
        store = TCPStore(
            bind,
            sock.getsockname()[1],
            is_master=True,
            wait_for_workers=False,
            multi_tenant=multi_tenant,
            master_listen_fd=sock.fileno(),
            timeout=timeout,
        )
    except BaseException:
        sock.close()
        raise
    sock.detach()  # the store owns the descriptor now and closes it with the store
    return store
