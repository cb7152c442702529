"""LaunchRequest: a launch fully decided, the one record every later stage reads."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from ..config import LaunchConfig

Entry = Literal["notebook", "in_process", "ranks", "cluster", "node", "script"]
ENTRIES: tuple[Entry, ...] = ("notebook", "in_process", "ranks", "cluster", "node", "script")


@dataclass(frozen=True)
class LaunchRequest:
    """What a launch runs with, decided before anything starts (resolution/resolve.py).

    entry: who asked — "notebook" (notebook_launch, start_launch, Accelerate's notebook_launcher()),
    "in_process" (notebook_launch(in_process=True): rank 0 of one, in the kernel),
    "ranks" (%%ranks), "cluster" (cluster=, in the kernel), "node" (one cluster node's launcher, on
    that node: its own devices, threads and port), "script" (the CLI on torchrun).
    config: the LaunchConfig the workers get; num_processes counts every rank of the world and
    num_machines / machine_rank / main_process_port are this request's.
    local_processes: ranks on this machine (on each node for "cluster"); world_size: all ranks.
    start_method: "fork", "spawn" or "forkserver" for notebook entries and nodes; "torchrun" for a
    script; "node" for cluster= (each node's launcher chooses on its machine); "none" in process.
    main_address: where the ranks meet — loopback on one machine, machine 0's address otherwise.
    port: the rendezvous port; 0 means any free port, bound by the launcher that hosts the store.
    store_bind: where machine 0's store listens (system/store.store_bind_address).
    network_env: the ranks' network-interface variables (GLOO_SOCKET_IFNAME, ...), and
    rendezvous_env: the variable that makes the ranks of one machine meet in a file — each for the
    entries whose workers take it (resolution/resolve.py's WORKER_NETWORK).
    threads_per_rank: OMP_NUM_THREADS for each rank (None: the user's own value, left as written;
    also None for cluster=, whose nodes decide on their own machines).
    cpu_world: the ranks compute on CPUs (asked for, or no GPU here; False for cluster=).
    visible_devices: CUDA_VISIBLE_DEVICES for every rank, or None to inherit.
    notes: lines to say once, in the entry's own voice (a busy port given up, a default chosen).
    """

    entry: Entry
    config: LaunchConfig
    local_processes: int
    world_size: int
    start_method: str
    main_address: str
    port: int
    threads_per_rank: int | None
    cpu_world: bool
    visible_devices: str | None
    store_bind: str
    network_env: Mapping[str, str] = field(default_factory=dict)
    rendezvous_env: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
