"""The rendezvous store of a launch: torch's TCPStore this machine hosts (where it listens, and
hosting it there), and on one machine the file the ranks meet in instead.

On one machine the store listens on loopback only; over several machines on the address the others
were given for machine 0. Shared by the notebook launcher (launch/planning.py) and the CLI
(cli/torchrun.py). torch is imported only when a store is hosted or opened.

Why the ranks of a one-machine launch meet in a file (torch's FileStore in the run's private
directory) and not over TCP: every connection torch's TCPStore makes formats the peer address with
getnameinfo, a reverse DNS lookup of ::ffff:127.0.0.1, which /etc/hosts does not list, so it goes to
the DNS server. A server that drops a query (one that rate-limits, one that cannot be reached) holds
that rank for the resolver's timeout, 5 s by default: one relaunch in twenty took 5.07 s on a
machine whose DNS server dropped every fiftieth query of a burst (issue 38). A file needs no lookup,
and its waits wake when it is written (system/waking_file_store.py), not at FileStore's 10 ms polls.
The TCP store still answers MASTER_ADDR:MASTER_PORT for code that calls init_process_group itself:
the notebook launcher hosts it only when such a rank connects (launch/supervise/store_on_demand.py),
so a launch whose ranks never do pays no lookup.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from ..records.names import ALL_INTERFACES, FILE_RENDEZVOUS_ENV, LOOPBACK, RUN_DIR_ENV
from .private_files import is_private_dir


def file_rendezvous_env(num_machines: int) -> dict[str, str]:
    """The workers' variable that makes them meet in a file: on one machine only (the one place
    that decides it, for notebook_launch and the CLI)."""
    return {FILE_RENDEZVOUS_ENV: "1"} if num_machines == 1 else {}


def file_store(timeout_s: float) -> Any:
    """This rank's handle on the launch's rendezvous file, or None when the launcher asked for TCP
    (or gave no private run directory: then MASTER_ADDR:MASTER_PORT serves). One file per attempt
    (TORCHELASTIC_RESTART_COUNT): a restarted attempt never reads the addresses of a dead one."""
    run_dir = os.environ.get(RUN_DIR_ENV)
    if os.environ.get(FILE_RENDEZVOUS_ENV) != "1" or not run_dir or not is_private_dir(run_dir):
        return None
    from .waking_file_store import waking_file_store

    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT") or "0"
    path = os.path.join(run_dir, f"rendezvous.attempt{attempt}")
    os.close(
        os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    )  # 0600, as the run's files
    return waking_file_store(path, timeout_s)  # torch's FileStore, whose waits wake on a write


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
    sock = listening_socket(bind, port)
    try:
        return store_on_socket(sock, bind, timeout_s, multi_tenant)
    except BaseException:
        sock.close()
        raise


def listening_socket(bind: str, port: int) -> socket.socket:
    """A socket listening on `bind`:`port` (0: a free port), for a TCPStore to take over."""
    family, kind, proto, _, address = socket.getaddrinfo(bind, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(socket.SOMAXCONN)
    except BaseException:
        sock.close()
        raise
    return sock


def store_on_socket(sock: socket.socket, bind: str, timeout_s: float, multi_tenant: bool = False) -> Any:
    """torch's TCPStore serving on `sock`, which it owns from then on (and closes with the store)."""
    import datetime

    from torch.distributed import TCPStore

    store = TCPStore(
        bind,
        sock.getsockname()[1],
        is_master=True,
        wait_for_workers=False,
        multi_tenant=multi_tenant,
        master_listen_fd=sock.fileno(),
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    sock.detach()
    return store
