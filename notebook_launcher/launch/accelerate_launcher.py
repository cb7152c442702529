"""Accelerate's `notebook_launcher(...)` and `debug_launcher(...)` signatures, run on notebook_launch.

A notebook written for Accelerate works with `from notebook_launcher import notebook_launcher`. It
returns our LaunchResult (rank 0's value is `result[0]`) and gets our launcher's behaviour: output
streamed per rank, failures with the remote traceback, nothing left behind. A failure raises a
WorkerError that `except ChildFailedError` (torch elastic's) also catches.

Every argument of Accelerate 1.x's keeps its meaning: rdzv_backend "static" or "c10d" (on one machine
the launcher's own store serves; across machines machine 0's launcher hosts it and the others wait
for it, so machines start in any order), monitor_interval (our launcher reacts to a worker at once,
so any positive interval is met), max_restarts=N (the whole group restarts after ANY failure, as torch
elastic does: restart_on="any"; result.restarts counts them), log_line_prefix_template (torchrun's
fields {role_name}, {rank}, {local_rank}).

Where the two differ: num_processes=None uses every GPU (or 2 CPU processes) instead of raising;
the default use_port="29500" on one machine means "any free port" (two launches in a row never
collide), and any busy port there is replaced by a free one, said in the cell (the one rule of
system/network.rendezvous_port, the same for every entry); rdzv_conf and rdzv_id are not needed
(the launcher hosts the rendezvous store); node_rank is kept under c10d (torch's c10d hands node ranks out by arrival).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import ConfigError
from ..records.names import DEFAULT_PORT, LOOPBACK
from .notebook import notebook_launch
from .result import LaunchResult

_DEFAULT_PORT = str(DEFAULT_PORT)  # Accelerate's default use_port: on one machine, "any free port"


def _port(use_port: str | int | None, num_nodes: int) -> int | None:
    if use_port in (None, ""):
        return None
    if str(use_port) == _DEFAULT_PORT and num_nodes == 1:
        return None
    try:
        return int(use_port)
    except (TypeError, ValueError):
        raise ConfigError(
            f"use_port={use_port!r} is not a port number; pass e.g. use_port='29500'."
        ) from None


def _endpoint(rdzv_endpoint: str, master_addr: str, port: int | None) -> tuple[str, int | None]:
    if not rdzv_endpoint:
        return master_addr, port
    host, _, endpoint_port = str(rdzv_endpoint).rpartition(":")
    if not host or not endpoint_port.isdigit():
        raise ConfigError(f"rdzv_endpoint={rdzv_endpoint!r} must be 'host:port', e.g. '10.0.0.1:29500'.")
    return host, int(endpoint_port)


def notebook_launcher(
    function: Callable[..., Any],
    args: Sequence[Any] = (),
    num_processes: int | None = None,
    mixed_precision: str = "no",
    use_port: str = _DEFAULT_PORT,
    master_addr: str = LOOPBACK,
    node_rank: int = 0,
    num_nodes: int = 1,
    rdzv_backend: str = "static",
    rdzv_endpoint: str = "",
    rdzv_conf: dict[str, Any] | None = None,
    rdzv_id: str = "none",
    max_restarts: int = 0,
    monitor_interval: float = 0.1,
    log_line_prefix_template: str | None = None,
) -> LaunchResult:
    """Run `function(*args)` on num_processes processes (per node), as Accelerate's notebook_launcher.

    max_restarts=N restarts the group after any failure (notebook_launch's own default restarts only
    after an infrastructure fault: restart_on="infrastructure").
    """
    if rdzv_backend not in ("static", "c10d"):
        raise ConfigError(f"rdzv_backend={rdzv_backend!r} is not valid; use 'static' or 'c10d'.")
    if node_rank >= num_nodes:
        raise ConfigError(f"node_rank={node_rank} must be less than num_nodes={num_nodes}.")
    address, port = _endpoint(rdzv_endpoint, master_addr, _port(use_port, num_nodes))
    return notebook_launch(
        function,
        args=tuple(args),
        num_processes=num_processes,
        mixed_precision=str(getattr(mixed_precision, "value", mixed_precision)).lower(),
        num_nodes=num_nodes,
        node_rank=node_rank,
        master_addr=address if (num_nodes > 1 or rdzv_endpoint) else None,
        master_port=port,
        rdzv_backend=rdzv_backend,
        max_restarts=max_restarts,
        monitor_interval=monitor_interval,
        restart_on="any",
        log_line_prefix_template=log_line_prefix_template,
    )


def debug_launcher(
    function: Callable[..., Any], args: Sequence[Any] = (), num_processes: int = 2
) -> LaunchResult:
    """Accelerate's debug_launcher: `function(*args)` on num_processes CPU processes."""
    return notebook_launch(function, args=tuple(args), num_processes=num_processes, use_cpu=True)
