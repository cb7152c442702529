"""The notebook launcher: HOW local worker processes start, stream and come back (README.md here
walks one launch through the rooms).

`notebook_launch` / `start_launch` (notebook.py) plan a run (planning.py), start and watch the
workers (supervise/), run the child's side (worker/), handle what goes wrong (faults/), start fast
(warm/), and hand back a LaunchResult or a WorkerError (result.py), whose traceback the cell shows
as IPython would (traceback_view.py, colour.py). Events (events.py) feed observers such as the
RunView.

Imports: config, system, estimate, errors; the runtime only inside workers and for the collective
records. Imported by the public face, widgets, clusters and interactive. Never by runtime or cli.
Never imports the widgets: view=True asks view_factory.py for the view the public face registered.
"""

from .handle import RunHandle
from .notebook import notebook_launch, start_launch
from .result import (
    LaunchInterrupted,
    LaunchPreempted,
    LaunchResult,
    LaunchStopped,
    LaunchTimeout,
    RendezvousStalled,
    WorkerError,
)
from .warm.pool import release_warm_pool

try:  # WorkerError as torch elastic's ChildFailedError too (child_failed.py registers it)
    from . import child_failed  # noqa: F401
except ImportError:  # no torch.distributed: a plain WorkerError still says everything
    pass

__all__ = [
    "LaunchInterrupted",
    "LaunchPreempted",
    "LaunchResult",
    "LaunchStopped",
    "LaunchTimeout",
    "RendezvousStalled",
    "RunHandle",
    "WorkerError",
    "notebook_launch",
    "release_warm_pool",
    "start_launch",
]
