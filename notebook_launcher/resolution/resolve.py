"""resolve_launch: (arguments, YAML, environment) -> one LaunchRequest, for every entry.

The order is the order of the questions: what may be applied at all, which machines, which GPUs,
how many processes, the single-process rule, the strategy (scripts), how workers start, the port,
threads and devices. Checks that need no hardware come first, so bad input fails fast without
detecting anything. Each rule lives in processes.py / start_method.py / machines.py /
system/network.py and is called only from here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from ..config import LaunchConfig, resolve_config
from ..errors import ConfigError
from ..records.names import LOOPBACK
from ..system.hardware import HardwareInfo, detect, threads_per_rank
from ..system.network import busy_port_note, free_port, rendezvous_port, workers_interface_env
from ..system.store import file_rendezvous_env, store_bind_address
from .processes import (
    check_gpu_ids,
    check_machines,
    check_restarts,
    check_script_strategy,
    count_processes,
    script_strategy,
    single_process_rule,
    visible_devices,
)
from .request import Entry, LaunchRequest
from .start_method import choose_start_method


def layered_config(config: Any, overrides: Mapping[str, Any]) -> LaunchConfig:
    """Explicit keyword arguments > the given config (a LaunchConfig, a dict or a file path) > the
    default config file > defaults. A None argument means "not given"."""
    base = resolve_config(config)
    return base.replace(**{key: value for key, value in overrides.items() if value is not None})


def resolve_launch(
    config: LaunchConfig,
    entry: Entry,
    *,
    num_processes: int | None = None,
    processes_given: str | None = None,
    type_given: bool = False,
    start_method: str = "auto",
    threads: int | None = None,
    hardware: HardwareInfo | None = None,
    cluster_default: Callable[[], tuple[int, str]] | None = None,
) -> LaunchRequest:
    """The launch `entry` asks for, fully decided.

    num_processes: ranks per machine as given in the call (None: not given; a script gives its total
    in config.num_processes). processes_given: how the user gave a process count, in their words
    ("num_processes=2", "--num_processes 4"), when they did. type_given: distributed_type was set in
    the same place. threads: the CLI's --num_cpu_threads_per_process. cluster_default: the cluster's
    own ranks per node (cluster=) and where they run.
    """
    notes: list[str] = []
    given = processes_given or (f"num_processes={num_processes}" if num_processes is not None else None)
    check_restarts(config, entry)
    if entry in ("ranks", "in_process") and config.num_machines > 1:
        raise ConfigError(
            f"num_machines={config.num_machines}: {_WHO[entry]} runs on this machine only. Use notebook_launch "
            "(num_nodes=...) or `notebook-launcher launch` for a run over several machines."
        )
    if entry in ("notebook", "script"):
        check_machines(config)
    if entry == "script":
        check_script_strategy(config)
    if entry == "cluster" and start_method != "auto":
        raise ConfigError(
            f"start_method={start_method!r} cannot be applied with cluster=: each node's launcher starts its "
            "workers itself (fork from a clean, single-threaded process). Leave start_method unset."
        )
    machine = _Hardware(hardware)
    check_gpu_ids(config, machine)
    local = count_processes(num_processes, config, entry, machine, notes.append, cluster_default)
    world = local * config.num_machines
    config = single_process_rule(
        config, world, processes_given=given, type_given=type_given, say=notes.append
    )
    if entry == "script":
        config = config.replace(distributed_type=script_strategy(config, local, world, machine()))
    method = _start_method(entry, start_method, notes)
    port = _port(config, entry, notes)
    address = str(config.main_process_ip) if config.num_machines > 1 else LOOPBACK
    config = config.replace(num_processes=world)
    if entry == "script":
        config = config.replace(main_process_ip=config.main_process_ip or LOOPBACK, main_process_port=port)
    network_env, rendezvous_env = _worker_network(config, entry, notes)
    return LaunchRequest(
        entry,
        config,
        local,
        world,
        method,
        address,
        port,
        *_this_machine(config, entry, local, threads, machine),
        store_bind=store_bind_address(config.main_process_ip, config.num_machines),
        network_env=network_env,
        rendezvous_env=rendezvous_env,
        notes=tuple(notes),
    )


def _this_machine(
    config: LaunchConfig, entry: Entry, local: int, threads: int | None, machine: Callable[[], HardwareInfo]
) -> tuple[int | None, bool, str | None]:
    """(threads per rank, the ranks compute on CPUs, CUDA_VISIBLE_DEVICES) on the machine the ranks
    run on; cluster= leaves them to each node (entry "node"), which runs on its own machine."""
    if entry == "cluster":
        return None, False, None
    on_cpu = config.runs_on_cpu or machine().cuda_device_count == 0
    return threads_per_rank(local, threads), on_cpu, visible_devices(config)


# Which entries' workers take the network-interface variables (one machine: loopback; several:
# the interface that reaches machine 0) and the one-machine file rendezvous. %%ranks and one-node
# clusters keep the TCP store on loopback, which their ranks' own init_process_group reaches.
WORKER_NETWORK: dict[Entry, tuple[bool, bool]] = {
    "notebook": (True, True),
    "script": (True, True),
    "node": (True, False),  # only over several nodes (one node: as %%ranks)
    "ranks": (False, False),
    "cluster": (False, False),  # decided on each node
    "in_process": (False, False),
}


def _worker_network(
    config: LaunchConfig, entry: Entry, notes: list[str]
) -> tuple[dict[str, str], dict[str, str]]:
    interfaces, file_meeting = WORKER_NETWORK[entry]
    if entry == "node" and config.num_machines == 1:
        interfaces = False
    network: dict[str, str] = {}
    if interfaces and not (config.num_machines > 1 and not config.main_process_ip):
        network, note = workers_interface_env(
            config.num_machines, config.main_process_ip, config.main_process_port
        )
        if note:
            notes.append(note)
    return network, file_rendezvous_env(config.num_machines) if file_meeting else {}


_WHO = {"ranks": "%%ranks", "in_process": "in_process=True"}


class _Hardware:
    """This machine's hardware, detected on first need (many launches never need it)."""

    def __init__(self, known: HardwareInfo | None) -> None:
        self._known = known

    def __call__(self) -> HardwareInfo:
        if self._known is None:
            self._known = detect()
        return self._known


def _start_method(entry: Entry, requested: str, notes: list[str]) -> str:
    if entry == "script":
        return "torchrun"
    if entry == "cluster":
        return "node"
    if entry == "in_process":
        return "none"
    if entry == "node":
        # A node's launcher forks from its own clean process; a thread there (a Ray actor's) makes
        # fork unsafe, so its workers are spawned instead.
        return "fork" if threading.active_count() == 1 else "spawn"
    method, note = choose_start_method(requested)
    if note:
        notes.append(note)
    return method


def _port(config: LaunchConfig, entry: Entry, notes: list[str]) -> int:
    """The rendezvous port by the one rule (system/network.rendezvous_port). cluster=: node 0 picks it
    on its machine. A script's torchrun needs a number, so "any free port" becomes one here."""
    if entry in ("cluster", "in_process"):
        return 0  # cluster=: node 0 decides on its machine; in process: no rendezvous
    port, note = rendezvous_port(config.main_process_port, config.num_machines, config.machine_rank)
    if entry == "script" and port == 0:
        port = free_port()
        if note:
            note = busy_port_note(int(config.main_process_port or 0), port)
    if note:
        notes.append(note)
    return port
