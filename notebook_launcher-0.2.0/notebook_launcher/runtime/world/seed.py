"""set_seed: one call seeds python, numpy and torch (CPU and every GPU)."""

from __future__ import annotations

import os
import random

import torch


def set_seed(seed: int, device_specific: bool = False, deterministic: bool = False) -> None:
    """Seed every RNG; with device_specific each rank gets seed + rank (for different augmentations)."""
    if device_specific:
        seed += int(os.environ.get("RANK", 0))
    random.seed(seed)
    try:
        import numpy

        numpy.random.seed(seed % 2**32)
    except ImportError:
        pass
    torch.manual_seed(seed)
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.manual_seed_all(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True)
