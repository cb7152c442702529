"""How `pytest -n auto` splits the suite over pytest-xdist's worker processes (no tests here).

The machine sits a third idle in a one-process run (tests wait on kernels, clusters, timeouts), so
the suite can run on a few workers; tests/conftest.py wires this in. A work unit is one test file, so
its module fixtures (a kernel, a Jupyter server) start once, except the files that share one real
component, which form one unit so that one worker owns it: the Ray cluster (started once for them) and
the local SLURM node (two workers' jobs would queue behind each other on its CPUs). Units start
longest first (seconds per file in suite_weights.json, from scripts/suite_weights.py over a
one-process run), so that the run does not end on a long file started last; a file that is not in
the table yet counts as DEFAULT_SECONDS. The order only changes which worker runs what and when,
never what runs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

WEIGHTS_FILE = Path(__file__).resolve().parent / "suite_weights.json"
DEFAULT_SECONDS = 20.0
# Files that must run on one worker, one after the other: they share the session's Ray cluster
# (ray_support.shared_ray_cluster) or submit jobs to the one-node SLURM (slurm_support).
SHARED_UNITS = {
    "test_ray.py": "clusters",
    "test_slurm.py": "clusters",
    "test_slurm_srun.py": "clusters",
    "test_cluster_notebook.py": "clusters",
}


def _path_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def unit_of(nodeid: str) -> str:
    """The work unit of a test: its file, or the shared unit its file belongs to."""
    path = _path_of(nodeid)
    return SHARED_UNITS.get(os.path.basename(path), path)


def _file_seconds() -> dict[str, float]:
    if not WEIGHTS_FILE.exists():
        return {}
    return {str(k): float(v) for k, v in json.loads(WEIGHTS_FILE.read_text()).items()}


def unit_seconds(nodeids: Sequence[str]) -> dict[str, float]:
    """Each unit's expected seconds: the sum over its files (each file counted once)."""
    seconds = _file_seconds()
    files_of: dict[str, set[str]] = {}
    for nodeid in nodeids:
        files_of.setdefault(unit_of(nodeid), set()).add(os.path.basename(_path_of(nodeid)))
    return {unit: sum(seconds.get(f, DEFAULT_SECONDS) for f in files) for unit, files in files_of.items()}


def longest_units_first(items: list) -> None:
    """Reorder collected items in place: units by expected seconds, longest first; the order within a
    unit is kept (a stable sort), so a file's tests run in the order they are written."""
    cost = unit_seconds([item.nodeid for item in items])
    items.sort(key=lambda item: -cost[unit_of(item.nodeid)])


def make_scheduler(config, log):  # type: ignore[no-untyped-def]
    """xdist's scope scheduler with our units, taken in collection order (longest first, above)."""
    from xdist.scheduler import LoadScopeScheduling

    class SuiteScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    config.option.loadscopereorder = False  # keep our order, not xdist's (by number of tests)
    return SuiteScheduling(config, log)


def worker_count() -> int:
    """`-n auto`: one worker per CPU plus one, since a third of a one-process run is spent waiting
    (PYTEST_XDIST_AUTO_NUM_WORKERS overrides)."""
    chosen = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS")
    if chosen:
        return int(chosen)
    return len(os.sched_getaffinity(0)) + 1
