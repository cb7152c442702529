"""The notebook launcher: HOW local worker processes start, stream and come back.

`notebook_launch` / `start_launch` (notebook.py) plan a run (planning.py), start and watch the
workers (supervisor.py, worker.py, channel.py), and hand back a LaunchResult or a WorkerError
(result.py). Events (events.py) feed observers such as the RunView. Each worker runs a
memory_sampler.py thread; inbox.py reads what workers send, and memory_watch.py turns the memory
samples into events, `result.memory` and the warning before the limit.

Imports: config, hardware, host_memory, errors; the runtime only inside workers. Imported by the
public face, widgets, clusters and interactive. Never by runtime or cli. Never imports the widgets:
view=True asks view_factory.py for the view the public face registered.
"""

from .handle import RunHandle
from .notebook import notebook_launch, start_launch
from .result import (
    LaunchPreempted,
    LaunchResult,
    LaunchStopped,
    LaunchTimeout,
    RendezvousStalled,
    WorkerError,
)
from .warm.pool import release_warm_pool

__all__ = [
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
