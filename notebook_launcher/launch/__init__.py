"""The notebook launcher: HOW local worker processes start, stream and come back (README.md here
walks one launch through the rooms).

`notebook_launch` / `start_launch` (notebook.py) resolve a run (../resolution/) and plan it
(planning.py), start and watch the workers (supervise/), run the child's side (worker/), restart
after faults (faults/), start fast (warm/), and hand back a LaunchResult or a WorkerError (result.py), whose traceback the cell shows
as IPython would (traceback_view.py, colour.py). Events (events.py) feed observers such as the
RunView.

Imports: resolution, config, system, estimate, records, errors; the runtime only at function level, where a
worker runs (worker/, in_process.py) or is preloaded (warm/). No torch at import, nor for launches
that do not fork of functions that need none (a forked launch warms torch up: warm/warmup.py). Imported by the public face, widgets, clusters and
interactive. Never by runtime or cli.
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

# The modules at this level that rooms outside launch/ may import (the sub-rooms list theirs in
# their own __all__; tests/test_architecture.py holds clusters/, interactive/ and widgets/ to both).
OFFERED_MODULES = ("planning", "events", "result", "handle", "notebook")

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
