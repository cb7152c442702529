"""network.py on this machine: routes, the interface choice, and the probe of the main machine's port.
(Across two hosts: tests/test_network_namespaces.py.)"""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest
from test_cli_helpers import free_port

from notebook_launcher.errors import NetworkError
from notebook_launcher.resolution import resolve_launch
from notebook_launcher.system.network import (
    SOCKET_IFNAME_VARS,
    interface_addresses,
    loopback_interface_env,
    route_to,
    socket_interface_env,
    wait_for_main,
    workers_interface_env,
)


def _loopback_name() -> str:
    return interface_addresses()["127.0.0.1"][0]


def test_interface_addresses_include_loopback():
    assert "127.0.0.1" in interface_addresses()


def test_the_route_to_a_local_address_is_the_interface_holding_it():
    route = route_to("127.0.0.1")
    assert (route.interface, route.local_address, route.is_local) == (_loopback_name(), "127.0.0.1", True)
    other = [a for a in interface_addresses() if a != "127.0.0.1" and "." in a]
    if other:  # e.g. eth0's address: held by that interface, not by the loopback
        route = route_to(other[0])
        assert route.interface == interface_addresses()[other[0]][0] and route.is_local


def test_the_choice_goes_to_gloo_and_tensorpipe_and_says_so():
    env, note = socket_interface_env("127.0.0.1", 29500, environ={})
    assert env == {"GLOO_SOCKET_IFNAME": _loopback_name(), "TP_SOCKET_IFNAME": _loopback_name()}
    assert note == (
        f"network interface {_loopback_name()} (127.0.0.1) holds the main address 127.0.0.1; "
        f"workers use GLOO_SOCKET_IFNAME={_loopback_name()}."
    )


@pytest.mark.parametrize("name", SOCKET_IFNAME_VARS)
def test_an_interface_the_user_chose_is_kept(name):
    env, note = socket_interface_env("127.0.0.1", 29500, environ={name: "eth7"})
    assert env == {}
    assert note == f"network interface as set in the environment: {name}=eth7."


def test_a_loopback_main_address_with_a_known_peer_routes_to_the_peer():
    """Debian maps the own hostname to 127.0.1.1: on the main node, route to another node instead."""
    peer = next((a for a in interface_addresses() if "." in a and not a.startswith("127.")), None)
    if peer is None:
        pytest.skip("this machine has no IPv4 address besides loopback")
    env, note = socket_interface_env("127.0.1.1", 29500, environ={}, peer=peer)
    assert env["GLOO_SOCKET_IFNAME"] == interface_addresses()[peer][0]
    assert (
        f"routes to {peer}, another machine of the run (the main address 127.0.1.1 is loopback here)" in note
    )


def test_choosing_leaves_this_process_environment_alone():
    before = dict(os.environ)
    socket_interface_env("127.0.0.1", 29500)
    resolve_launch(_two_machine_config(), "notebook", num_processes=1)
    assert dict(os.environ) == before


def _two_machine_config():
    from notebook_launcher import LaunchConfig

    return LaunchConfig(num_machines=2, machine_rank=1, main_process_ip="127.0.0.1", main_process_port=29500)


def test_a_single_machine_launch_keeps_gloo_on_loopback_without_a_word(monkeypatch):
    from notebook_launcher import LaunchConfig

    for name in SOCKET_IFNAME_VARS:
        monkeypatch.delenv(name, raising=False)
    for entry in ("notebook", "script"):  # notebook_launch and the CLI: the same variables, no line
        request = resolve_launch(LaunchConfig(), entry, num_processes=2)
        env = request.network_env
        assert env == {"GLOO_SOCKET_IFNAME": _loopback_name(), "TP_SOCKET_IFNAME": _loopback_name()}
        assert not any("interface" in note for note in request.notes)
    assert workers_interface_env(1, None, None) == (env, None)


def test_on_one_machine_the_users_interface_wins():
    assert loopback_interface_env({"GLOO_SOCKET_IFNAME": "eth0"}) == {}
    assert loopback_interface_env({"NCCL_SOCKET_IFNAME": "ib0"}) == {}


def test_the_probe_returns_once_the_port_answers():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert wait_for_main("127.0.0.1", server.getsockname()[1], say=pytest.fail) is True


def test_the_probe_waits_for_a_main_machine_that_starts_late():
    port, lines = free_port(), []
    server = socket.socket()

    def start_late():
        time.sleep(1.5)
        server.bind(("127.0.0.1", port))
        server.listen()

    starter = threading.Thread(target=start_late)
    starter.start()
    try:
        assert wait_for_main("127.0.0.1", port, wait=60, say=lines.append) is True
    finally:
        starter.join()
        server.close()
    assert lines == [
        f"waiting up to 60 s for the main machine at 127.0.0.1:{port} to start its launch (connection refused so far)."
    ]


def test_the_probe_gives_up_on_a_port_nobody_opens():
    port = free_port()
    with pytest.raises(NetworkError, match=rf"Nothing accepted connections at 127.0.0.1:{port} for 1 s"):
        wait_for_main("127.0.0.1", port, wait=1, say=lambda _line: None)


def test_the_probe_stops_when_asked():
    assert wait_for_main("127.0.0.1", free_port(), say=lambda _line: None, should_stop=lambda: True) is False


def test_an_unknown_host_name_is_named():
    with pytest.raises(NetworkError, match=r"main address 'no-such-host\.invalid' cannot be resolved"):
        wait_for_main("no-such-host.invalid", 29500)


def test_a_machine_name_that_resolves_to_loopback_gets_a_hint(monkeypatch):
    """Debian's /etc/hosts maps the own hostname to 127.0.1.1: other machines cannot use that."""
    import notebook_launcher.system.network as network

    monkeypatch.setattr(network, "resolve_host", lambda host: "127.0.0.1")
    _env, note = socket_interface_env("node0", 29500, environ={})
    assert "holds the main address node0 (127.0.0.1 here: other machines cannot reach this one" in note
    assert "cannot reach" not in socket_interface_env("localhost", 29500, environ={})[1]
