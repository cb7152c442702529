"""ZeRO-3 in fp32: keep one copy of each parameter partition, as DeepSpeed itself intends.

DeepSpeed's stage-3 optimizer keeps an fp32 "master" partition beside the partition the model
uses. When the two have the same dtype and device (fp32 training, no optimizer offload) its
`_create_fp32_partitions` means to use the model's partition as the master, and the rest of its
code handles that alias (the copy back after `step()` is then a copy onto itself). The check it
uses compares a `torch.device` with a device *name* string, which is never equal, so every rank
holds a second fp32 copy of its partition: 0.67x DDP's parameter+optimizer bytes at 2 ranks
instead of 0.5x. `share_master_partitions` makes the alias DeepSpeed meant, under the same
conditions it states; anything else (bf16/fp16, offload, NVMe swapping) is left as is.
"""

from __future__ import annotations

from typing import Any

import torch


def share_master_partitions(zero_optimizer: Any) -> int:
    """Point each fp32 master partition at the model's own partition where they match; returns
    the bytes freed (0 when nothing applies, e.g. ZeRO-1/2 or mixed precision)."""
    lows = getattr(zero_optimizer, "fp16_partitioned_groups_flat", None)
    masters = getattr(zero_optimizer, "fp32_partitioned_groups_flat", None)
    master_dtype = getattr(zero_optimizer, "master_weights_and_grads_dtype", None)
    if not lows or not masters or len(lows) != len(masters) or master_dtype is None:
        return 0
    if getattr(zero_optimizer, "offload_optimizer", True):
        return 0
    if getattr(zero_optimizer, "swap_optimizer", False):
        return 0
    device = torch.device(zero_optimizer.device)
    freed = 0
    for low, master in zip(lows, masters, strict=True):
        if low is None or master is low or low.dtype != master_dtype or master.dtype != master_dtype:
            continue
        if low.device != device or master.device != device or low.shape != master.shape:
            continue
        if low.untyped_storage().data_ptr() == master.untyped_storage().data_ptr():
            continue
        freed += master.numel() * master.element_size()
        master.data = low.data  # same tensor object (optimizer state is keyed on it), shared storage
    return freed
