"""What listens on the network during a launch (issue 11, section 8): on one machine the rendezvous
store listens on loopback only; over several machines on the address given for machine 0."""

from __future__ import annotations

import json
import socket

import psutil
import pytest
from test_cli_helpers import cli_env, explain, free_port, run_cli, two_machines_here

from notebook_launcher import notebook_launch
from notebook_launcher.records.names import ALL_INTERFACES, LOOPBACK
from notebook_launcher.system.store import store_bind_address


def store_listeners():
    """In a worker: the addresses its launcher (the parent, which hosts the store) listens on at
    MASTER_PORT."""
    import os

    from notebook_launcher import Accelerator

    Accelerator().wait_for_everyone()  # every rank has been through the rendezvous
    port = int(os.environ["MASTER_PORT"])
    launcher = psutil.Process(os.getppid())
    return sorted(
        {
            c.laddr.ip
            for c in launcher.net_connections("inet")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == port
        }
    )


def test_one_machine_store_listens_on_loopback_only():
    result = notebook_launch(store_listeners, num_processes=2, quiet=True, timeout=60)
    assert list(result) == [[LOOPBACK], [LOOPBACK]]  # before: ["::"], every interface


def _non_loopback_address() -> str:
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family == socket.AF_INET and not address.address.startswith("127."):
                return address.address
    pytest.skip("this machine has no IPv4 address besides loopback to rehearse two machines on")


def test_several_machines_store_listens_on_the_address_given_for_machine_zero():
    address, port = _non_loopback_address(), free_port()
    results = two_machines_here(store_listeners, address, port)
    # Machine 0's launcher listens on the port at the address given, and only there; machine 1's
    # launcher listens on nothing (it hosts no store).
    assert results[0] == [[address]] and results[1] == [[]]


def test_bind_address_choice():
    assert store_bind_address("10.1.2.3", 1) == LOOPBACK  # one machine: whatever the config file says
    assert store_bind_address(LOOPBACK, 2) == LOOPBACK  # a rehearsal of two machines on one host
    # Not an address of this machine (TEST-NET-3, a NAT's public address, say): reachable only
    # through some local interface, so all of them.
    assert store_bind_address("203.0.113.7", 2) == ALL_INTERFACES


LISTENER_PROBE = """
import json, os, psutil
launcher = psutil.Process(os.getppid())
listening = sorted({c.laddr.ip for c in launcher.net_connections("inet") if c.status == psutil.CONN_LISTEN})
print("LAUNCHER_LISTENS " + json.dumps({"port": int(os.environ["MASTER_PORT"]), "ips": listening,
      "ports": sorted({c.laddr.port for c in launcher.net_connections("inet") if c.status == psutil.CONN_LISTEN})}))
"""


@pytest.mark.parametrize("backend", ["static", "c10d"])
def test_cli_on_one_machine_listens_on_loopback_only(tmp_path, backend):
    (tmp_path / "probe.py").write_text(LISTENER_PROBE)
    result = run_cli(
        ["launch", "--num_processes", "2", "--rdzv_backend", backend, "probe.py"],
        cwd=tmp_path,
        env=cli_env(tmp_path),
    )
    assert result.returncode == 0, explain(result)
    reports = [
        json.loads(line.split("LAUNCHER_LISTENS ", 1)[1])
        for line in result.stdout.splitlines()
        if "LAUNCHER_LISTENS" in line
    ]
    assert len(reports) == 2, explain(result)
    for report in reports:
        assert report["port"] in report["ports"]  # the launcher (torchrun's agent) hosts the store ...
        assert report["ips"] == [LOOPBACK]  # ... on loopback, and nothing of it on another interface
    if backend == "c10d":
        assert "on one machine the rendezvous is static, on 127.0.0.1 only" in result.stderr


def test_machine_zero_listens_at_once_but_hosts_its_store_only_after_its_ranks_are_forked():
    """The TCPStore's server thread formats each peer's address with getnameinfo, which holds glibc's
    resolver lock for a moment; a rank forked in that moment inherits the lock held and hangs at its
    own first lookup. So machine 0 binds its port first (the other machines' probes queue there) and
    hosts the store when a connection arrives, which the supervisor watches for after the forks."""
    from notebook_launcher import LaunchConfig
    from notebook_launcher.launch import planning
    from notebook_launcher.launch.supervise.store_on_demand import StoreOnDemand
    from notebook_launcher.resolution.resolve import resolve_launch

    config = LaunchConfig(
        num_machines=2, machine_rank=0, main_process_ip=LOOPBACK, main_process_port=free_port()
    )
    request = resolve_launch(config, "notebook", num_processes=2, start_method="fork")
    _, port, store = planning.rendezvous(request, on_demand=True)
    try:
        assert isinstance(store, StoreOnDemand) and store.store is None  # no TCPStore thread yet
        with socket.create_connection((LOOPBACK, port), timeout=5):  # a machine's probe is answered
            pass
    finally:
        store.close()
