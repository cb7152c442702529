"""DeepSpeed ZeRO 1-3: the strategy (strategy.py), the engine's config dict (config.py), optimizers
for offload (offload.py) and ZeRO-3's single fp32 copy of each partition (memory.py).

Importing this package does not import deepspeed; the strategy does, when it is built."""

from .strategy import DeepSpeedStrategy

__all__ = ["DeepSpeedStrategy"]
