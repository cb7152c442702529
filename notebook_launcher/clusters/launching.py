"""From `notebook_launch(..., cluster=...)` to a ClusterRun: which cluster (the argument, else the
config's `cluster_config`), how many ranks per node, and the function shipped by value."""

from __future__ import annotations

import contextlib
import sys
import sysconfig
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, cast

from ..config import CLUSTER_TYPES, LaunchConfig
from ..errors import ConfigError, bad_value
from ..launch.planning import check_call
from ..launch.supervise.payload import pickle_target
from ..resolution import layered_config, resolve_launch
from .driver import ClusterRun
from .node import NodeJob
from .ray import RayCluster
from .slurm import SlurmCluster

Cluster = RayCluster | SlurmCluster


def _ray_from(section: Any) -> RayCluster:
    return RayCluster(
        address=section.ray_address,
        num_nodes=section.num_nodes,
        resources_per_worker=section.ray_resources_per_worker,
    )


def _slurm_from(section: Any) -> SlurmCluster:
    return SlurmCluster(
        nodes=section.num_nodes,
        gpus_per_node=section.slurm_gpus_per_node,
        partition=section.slurm_partition,
        time=section.slurm_time,
        account=section.slurm_account,
        folder=section.slurm_folder,
        setup=list(section.slurm_setup),
        cpus_per_task=section.slurm_cpus_per_task,
    )


# Every cluster kind, registered once: its name (config/cluster.py's CLUSTER_TYPES), its settings
# class, and how a config's cluster_config section makes one. A new kind is its module plus a row.
KINDS: dict[str, tuple[type, Callable[[Any], Any]]] = {
    "ray": (RayCluster, _ray_from),
    "slurm": (SlurmCluster, _slurm_from),
}


def resolve_cluster(cluster: Any, config: LaunchConfig) -> Cluster | None:
    """The cluster to run on, or None for this machine. An explicit `cluster=` wins over the
    config's cluster_config; `cluster="ray"` / `"slurm"` takes that engine's keys from it."""
    if isinstance(cluster, tuple(settings for settings, _ in KINDS.values())):
        return cast(Cluster, cluster)
    section = config.cluster_config
    if cluster is None:
        kind = section.cluster_type
    elif isinstance(cluster, str):
        kind = cluster.lower()
        if kind not in CLUSTER_TYPES:
            raise bad_value("cluster", cluster, CLUSTER_TYPES, "Or pass RayCluster(...) / SlurmCluster(...).")
    else:
        raise ConfigError(
            f"cluster={cluster!r} is not usable; pass 'ray', 'slurm', 'local', RayCluster(...) or SlurmCluster(...)."
        )
    if kind in KINDS:
        return cast(Cluster, KINDS[kind][1](section))
    return None


def cluster_run(
    fn: Callable[..., Any],
    args: Sequence[Any],
    kwargs: dict[str, Any] | None,
    options: dict[str, Any],
    overrides: dict[str, Any],
    observers: Sequence[Callable[[Any], None]],
    poll_hooks: Sequence[Callable[[], Any]] = (),
    should_stop: Callable[[], bool] | None = None,
) -> ClusterRun | None:
    """The run on the cluster that the options ask for, or None when the ranks run on this machine."""
    config = layered_config(options["config"], overrides)
    cluster = resolve_cluster(options.get("cluster"), config)
    if cluster is None:
        return None
    check_call(fn, args, options.get("timeout"))
    given = [name for name in ("node_rank", "master_addr", "master_port") if options.get(name) is not None]
    if given:
        raise ConfigError(
            f"{', '.join(given)} cannot be combined with cluster=: the {cluster.name} cluster decides where each node "
            "runs and node 0 hosts the rendezvous. Leave them out."
        )
    if options.get("in_process"):
        raise ConfigError("in_process=True runs in this kernel; it cannot be combined with cluster=.")
    say = (lambda _line: None) if options["quiet"] else print
    num_nodes = options.get("num_nodes") or cluster.num_nodes
    request = resolve_launch(
        config.replace(num_machines=num_nodes, machine_rank=0),
        "cluster",
        num_processes=options.get("num_processes"),
        type_given=overrides.get("distributed_type") is not None,
        start_method=options.get("start_method", "auto"),
        cluster_default=lambda: (cluster.default_processes(), f"the {cluster.name} cluster"),
    )
    for note in request.notes:
        say(f"notebook_launch: {note}")
    with _by_value(fn, args, kwargs or {}):
        payload = pickle_target(fn, tuple(args), dict(kwargs or {}), say)
    job = NodeJob(
        payload,
        request.config.to_dict(),
        request.local_processes,
        0,
        num_nodes,
        "",
        0,
        options.get("timeout"),
    )
    return ClusterRun(cluster.backend(), job, request.config, observers, poll_hooks, should_stop, say)


@contextlib.contextmanager
def _by_value(fn: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Iterator[None]:
    """Functions and classes from the notebook's own modules (a helper .py next to the notebook)
    travel by value, like those defined in cells: the cluster's machines cannot import them."""
    import cloudpickle

    modules = {_local_module(obj) for obj in (fn, *args, *kwargs.values())} - {None}
    for module in modules:
        cloudpickle.register_pickle_by_value(module)
    try:
        yield
    finally:
        for module in modules:
            cloudpickle.unregister_pickle_by_value(module)


def _local_module(obj: Any) -> Any:
    name = getattr(obj if callable(obj) else type(obj), "__module__", None)
    if not name or name in ("__main__", "builtins") or name.startswith("notebook_launcher"):
        return None
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None)
    if path is None:
        return None
    installed = {sysconfig.get_paths()[key] for key in ("purelib", "platlib", "stdlib")}
    if any(Path(path).resolve().is_relative_to(Path(root).resolve()) for root in installed):
        return None
    return module
