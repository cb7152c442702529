"""Where `cluster=` launches go: the public face hands in a runner, the launcher calls it.

The launcher never imports clusters/ (the arrow is clusters -> launch, which the cluster nodes run);
the public face (`notebook_launcher/__init__.py`) registers a runner that imports clusters/ only
when a launch names a cluster. Tiny and import-free on purpose, as view_factory.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .errors import ConfigError

# (fn, args, kwargs, options, overrides, observers, poll_hooks) -> the cluster's run, or None for this machine
ClusterRunner = Callable[..., Any]
_runner: ClusterRunner | None = None


def set_cluster_runner(runner: ClusterRunner | None) -> None:
    """Make `runner(...)` what a launch with cluster= (or a config's cluster_config) calls."""
    global _runner
    _runner = runner


def cluster_runner() -> ClusterRunner:
    """The registered runner; a clear error when nothing registered one."""
    if _runner is None:
        raise ConfigError(
            "cluster= needs the clusters package registered; `import notebook_launcher` registers it."
        )
    return _runner
