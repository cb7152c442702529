"""FSDP2 (`fully_shard`): the strategy (strategy.py), which submodules become units and the mesh
(plan.py), and sharded/full checkpoints (checkpoint.py)."""

from .strategy import FSDPStrategy

__all__ = ["FSDPStrategy"]
