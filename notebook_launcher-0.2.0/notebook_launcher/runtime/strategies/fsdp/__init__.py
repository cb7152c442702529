"""FSDP2 (`fully_shard`): the strategy (strategy.py), which submodules become units and the mesh
(plan.py), sharded/full checkpoints (checkpoint.py), and filling the shards of a model built on
the meta device (sharded_init.py)."""

from .strategy import FSDPStrategy

__all__ = ["FSDPStrategy"]
