"""The Accelerator's sharded-initialisation method (a mixin, kept apart from the facade).

Accelerate itself offers `init_empty_weights()` (a function: meta device everywhere) and, for
FSDP, `cpu_ram_efficient_loading` (rank 0 loads, the others stay empty; transformers' from_pretrained
honours it). `sharded_init()` is that second pattern for any model built in a cell: an addition of
ours, under its own name.
"""

from __future__ import annotations

import contextlib


class ShardingAPI:
    """Mixed into Accelerator; needs `self.strategy`."""

    def sharded_init(self) -> contextlib.AbstractContextManager:
        """Build a model inside this block so that no rank but the first holds all of it:

            with accelerator.sharded_init():
                model = MyTransformer()
            model, optimizer = accelerator.prepare(model, optimizer)

        FSDP (and DeepSpeed ZeRO-3): rank 0 builds the model for real, the other ranks on the meta
        device; `prepare` shards it and fills each rank's shards from rank 0's copy, so the weights
        are exactly those of an ordinary build with the same seed. ZeRO-3 with `zero3_init_flag`:
        DeepSpeed's `zero.Init`, which partitions every parameter as it is created. Strategies
        that keep a whole copy per rank (DDP, ZeRO-1/2, one process): an ordinary build.
        """
        return self.strategy.sharded_init()  # type: ignore[attr-defined]
