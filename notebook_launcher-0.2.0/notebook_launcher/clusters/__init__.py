"""WHERE ranks run beyond this machine: one module per engine — ray.py (RayCluster: a placement
group, one NodeAgent actor per node) and slurm.py (SlurmCluster: a submitit job, one task per node).

Each node starts its ranks with the ordinary local launcher (node.py; node_main.py in a clean
process for Ray, slurm_task.py in the SLURM task), so workers, the env contract and `Accelerator()`
are exactly those of a local launch. The notebook's side (driver.py) relays the nodes' events to
the same observers as local workers and returns the same LaunchResult or errors; launching.py turns
`notebook_launch(..., cluster=...)` into such a run.

Imports: launch, config, errors, network, schedulers; Ray and submitit only when used. Imported by
the public face (RayCluster, SlurmCluster) and, lazily, by launch/notebook.py for `cluster=`.
"""

from .ray import RayCluster
from .slurm import SlurmCluster

__all__ = ["RayCluster", "SlurmCluster"]
