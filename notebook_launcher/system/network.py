"""Ports and routes on this machine: free ports, the network interface that reaches the main
machine, and whether the main machine's rendezvous port answers yet.

Shared by the notebook launcher, the CLI, the cluster backends and the runtime (for worlds that
schedulers start). No torch here.

Why the interface matters: gloo advertises to its peers the address this machine's hostname
resolves to. In containers and on many Debian installs that is 127.0.0.1 (or 127.0.1.1), so a
peer on another machine dials its own loopback and the world never forms ("Gloo connectFullMesh
failed ... remote=[127.0.0.1]"). Setting GLOO_SOCKET_IFNAME to the interface that routes to the
main address makes gloo advertise that interface's address instead.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import ipaddress
import os
import socket
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError, NetworkError
from ..records.names import DEFAULT_PORT, LOOPBACK

# Any of these set by the user means they chose the interfaces themselves: we then set none.
SOCKET_IFNAME_VARS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "TP_SOCKET_IFNAME")
# What we set: gloo and tensorpipe pick their address from the hostname. NCCL is left alone: it
# chooses its own interfaces (preferring InfiniBand) and does not go by the hostname.
PICKED_VARS = ("GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME")
# How long a machine waits for the main machine's port: "refused" means the host is there but its
# launch has not started yet (worth waiting for); "unreachable" means packets get nowhere.
MAIN_START_WAIT_SECONDS = 300.0
UNREACHABLE_WAIT_SECONDS = 10.0
_ATTEMPT_SECONDS = 2.0
_RETRY_SECONDS = 0.5


def port_is_free(port: int, host: str = "") -> bool:
    """Whether a server could listen on `port` at `host` ("" = all interfaces, as TCPStore binds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def rendezvous_port(port: int | None, num_machines: int, machine_rank: int = 0) -> tuple[int, str | None]:
    """The one rule for the rendezvous port, for every entry (notebook_launch, start_launch, %%ranks,
    cluster nodes, Accelerate's notebook_launcher(), the CLI): (port, a line to say or None).

    One machine: unset or 0 gives 0, "any free port" (the caller binds it); a busy port gives 0 too,
    said in the line, since nothing outside this machine needs to find it. Several machines: unset
    gives DEFAULT_PORT, and a busy port on machine 0 (which hosts the rendezvous) is a ConfigError
    naming the fix, because every machine dials that number.
    """
    if num_machines == 1:
        if port and not port_is_free(port):
            return 0, busy_port_note(port)
        return port or 0, None
    chosen = DEFAULT_PORT if port is None else port
    if machine_rank == 0 and not port_is_free(chosen):
        raise ConfigError(
            f"main_process_port={chosen} is already in use on this machine (machine 0 hosts the rendezvous). "
            "Pass a free port, the same on every machine: master_port= in notebook_launch, "
            "--main_process_port in the CLI."
        )
    return chosen, None


def busy_port_note(busy: int, chosen: int | None = None) -> str:
    """The line that says a busy port on one machine gave way (with the free one, once it is known)."""
    free = f"a free port ({chosen})" if chosen else "a free port"
    return f"port {busy} is in use on this machine; using {free} instead."


def free_port() -> int:
    """A port that is free right now (the caller should bind it soon: another program may take it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


# ------------------------------------------------------------------ addresses and routes


def resolve_host(host: str) -> str:
    """The IP address of `host` (a name or an address); IPv4 preferred, as torch's TCPStore does."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise NetworkError(
            f"The main address {host!r} cannot be resolved on this machine ({exc.strerror}); pass the IP "
            "address of the main machine (node_rank 0) instead, or fix its name in DNS or /etc/hosts."
        ) from None
    infos.sort(key=lambda info: info[0] != socket.AF_INET)
    return str(infos[0][4][0])


def interface_addresses() -> dict[str, list[str]]:
    """Every address held by this machine's interfaces: {address: [interface, ...]} (getifaddrs)."""
    functions = _ifaddrs_functions()
    if functions is None:
        return {}
    getifaddrs, freeifaddrs = functions
    head = ctypes.POINTER(_IfAddrs)()
    if getifaddrs(ctypes.byref(head)) != 0:
        return {}
    found: dict[str, list[str]] = {}
    try:
        node = head
        while node:
            entry = node.contents
            address = _sockaddr_text(entry.ifa_addr) if entry.ifa_addr else None
            if address and entry.ifa_name:
                found.setdefault(address, []).append(entry.ifa_name.decode(errors="replace"))
            node = entry.ifa_next
    finally:
        freeifaddrs(head)
    return found


@functools.cache
def _ifaddrs_functions() -> tuple[Any, Any] | None:
    """libc's getifaddrs and freeifaddrs, found once per process: find_library runs `ldconfig -p` in
    a subprocess, which cost every launch milliseconds (more on a busy machine)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        return libc.getifaddrs, libc.freeifaddrs
    except (OSError, AttributeError, TypeError):
        return None


class _IfAddrs(ctypes.Structure):
    pass


_IfAddrs._fields_ = [
    ("ifa_next", ctypes.POINTER(_IfAddrs)),
    ("ifa_name", ctypes.c_char_p),
    ("ifa_flags", ctypes.c_uint),
    ("ifa_addr", ctypes.c_void_p),
    ("ifa_netmask", ctypes.c_void_p),
    ("ifa_ifu", ctypes.c_void_p),
    ("ifa_data", ctypes.c_void_p),
]


def _sockaddr_text(pointer: int) -> str | None:
    """An IPv4/IPv6 sockaddr as text (BSD sockaddrs start with a length byte, Linux's do not)."""
    raw = ctypes.string_at(pointer, 24)
    family = (
        raw[1] if sys.platform == "darwin" or "bsd" in sys.platform else int.from_bytes(raw[:2], "little")
    )
    if family == socket.AF_INET:
        return socket.inet_ntop(socket.AF_INET, raw[4:8])
    if family == socket.AF_INET6:
        return socket.inet_ntop(socket.AF_INET6, raw[8:24])
    return None


@dataclass(frozen=True)
class Route:
    """How this machine reaches the main address."""

    host: str  # as the user gave it
    address: str  # resolved
    local_address: str  # this machine's address on the way there
    interface: str | None  # the interface holding local_address (None: could not tell)
    is_local: bool  # the main address is this machine's own


def route_to(host: str, port: int = 9) -> Route:
    """Ask the kernel's routing table (a UDP connect sends nothing) which local address reaches `host`."""
    address = resolve_host(host)
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((address, port or 9))
        except OSError as exc:
            raise NetworkError(
                f"This machine has no route to the main address {host} ({address}) port {port}: "
                f"{exc.strerror}. Check the address, and that this machine is on the main machine's network."
            ) from None
        local = str(probe.getsockname()[0])
    holders = interface_addresses()
    names = holders.get(local, [])
    return Route(host, address, local, names[0] if names else None, address in holders)


def loopback_interface_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The workers' variables for a world on this machine alone: its loopback interface.

    gloo otherwise binds to the address the hostname resolves to, and where the hostname resolves to
    nothing (a fresh root, a container) every rank prints a C++ "Unable to resolve hostname" warning
    before it falls back to loopback anyway. Nothing is chosen when the user set any of
    SOCKET_IFNAME_VARS, or when no interface holds 127.0.0.1.
    """
    environ = os.environ if environ is None else environ
    if any(environ.get(name) for name in SOCKET_IFNAME_VARS):
        return {}
    names = interface_addresses().get(LOOPBACK, [])
    return {name: names[0] for name in PICKED_VARS} if names else {}


def workers_interface_env(
    num_machines: int, host: str | None, port: int | None
) -> tuple[dict[str, str], str | None]:
    """The workers' network-interface variables for a launch (notebook_launch's and the CLI's), and
    the line saying what was chosen: loopback for one machine (said by nothing: nothing to decide),
    else the interface that reaches the main machine (socket_interface_env)."""
    if num_machines == 1:
        return loopback_interface_env(), None
    return socket_interface_env(str(host), port or 9)


def socket_interface_env(
    host: str, port: int = 9, environ: Mapping[str, str] | None = None, peer: str | None = None
) -> tuple[dict[str, str], str]:
    """(variables for the workers, one line saying what was chosen) for a world across machines.

    The interface is the one that routes to the main address — on the main machine, the one
    holding that address. When the main address is a name that resolves to loopback here (Debian
    maps the own hostname to 127.0.1.1) and another machine of the world is known (`peer`), the
    interface that routes to that machine. Nothing is chosen when the user set any of
    SOCKET_IFNAME_VARS. The variables are meant for the workers' environment only.
    """
    environ = os.environ if environ is None else environ
    chosen = [f"{name}={environ[name]}" for name in SOCKET_IFNAME_VARS if environ.get(name)]
    if chosen:
        return {}, f"network interface as set in the environment: {', '.join(chosen)}."
    try:
        route = route_to(host, port)
        if peer and _is_loopback(route.address):
            route = route_to(peer, port)
    except NetworkError as exc:
        return {}, f"no network interface chosen: {exc}"
    if route.interface is None:
        return {}, (
            f"could not tell which network interface holds {route.local_address} (the way to {host}); "
            "if ranks cannot connect, set GLOO_SOCKET_IFNAME to that interface."
        )
    if route.host == host:
        target = f"{'holds' if route.is_local else 'routes to'} the main address {host}"
        if _is_loopback(route.address) and not _is_loopback_name(host):
            target += (
                f" ({route.address} here: other machines cannot reach this one at a loopback address; "
                "pass the main machine's IP address if they are separate machines)"
            )
    else:
        target = (
            f"routes to {route.host}, another machine of the run (the main address {host} is loopback here)"
        )
    return {name: route.interface for name in PICKED_VARS}, (
        f"network interface {route.interface} ({route.local_address}) {target}; "
        f"workers use GLOO_SOCKET_IFNAME={route.interface}."
    )


def _is_loopback(address: str) -> bool:
    return ipaddress.ip_address(address.split("%")[0]).is_loopback


def _is_loopback_name(host: str) -> bool:
    """What a user types to mean "this host" on purpose: a loopback address, or localhost."""
    try:
        return _is_loopback(host)
    except ValueError:
        return host.lower() in ("localhost", "localhost.localdomain", "ip6-localhost")


# ------------------------------------------------------------------ is the main machine there?

_UNREACHABLE = {errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ETIMEDOUT, errno.EHOSTDOWN}


def wait_for_main(
    host: str,
    port: int,
    *,
    wait: float = MAIN_START_WAIT_SECONDS,
    unreachable_wait: float = UNREACHABLE_WAIT_SECONDS,
    say: Callable[[str], None] = print,
    should_stop: Callable[[], bool] = lambda: False,
) -> bool:
    """Connect to the main machine's rendezvous port before any worker starts; True once it answers.

    Refused connections (the host is up, its launch not yet) are retried for `wait` seconds, saying
    so once; an unreachable address (no route, no answer) fails after `unreachable_wait` seconds.
    Raises NetworkError naming the address and port. False when `should_stop()` turned true.
    """
    address = resolve_host(host)
    started = time.monotonic()
    told = False
    while True:
        problem = _try_connect(address, port)
        if problem is None:
            return True
        refused, reason = problem
        waited = time.monotonic() - started
        if not refused and (waited >= unreachable_wait or reason.startswith("no route")):
            raise NetworkError(
                f"Cannot reach the main machine at {host}:{port} from this machine ({reason}, "
                f"after {waited:.0f} s). Check master_addr / main_process_ip (it must be an address of the "
                "node_rank 0 machine that this machine can reach), the network between the machines, and "
                "firewalls."
            )
        if refused and waited >= wait:
            raise NetworkError(
                f"Nothing accepted connections at {host}:{port} for {waited:.0f} s (connection refused): the "
                "main machine (node_rank 0) did not start its launch, or uses another port. Start it, with the "
                "same master_port on every machine."
            )
        if refused and not told:
            say(
                f"waiting up to {wait:.0f} s for the main machine at {host}:{port} to start its launch "
                "(connection refused so far)."
            )
            told = True
        if should_stop():
            return False
        time.sleep(_RETRY_SECONDS)


def _try_connect(address: str, port: int) -> tuple[bool, str] | None:
    """None when a TCP connection opened; else (refused?, reason)."""
    try:
        with socket.create_connection((address, port), timeout=_ATTEMPT_SECONDS):
            return None
    except ConnectionRefusedError:
        return True, "connection refused"
    except TimeoutError:
        return False, f"no answer within {_ATTEMPT_SECONDS:.0f} s"
    except OSError as exc:
        if exc.errno == errno.ENETUNREACH:
            return False, "no route to the network"
        if exc.errno in _UNREACHABLE:
            return False, exc.strerror or "unreachable"
        return False, str(exc)
