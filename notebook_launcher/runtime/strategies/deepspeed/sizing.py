"""ZeRO's bucket and live-parameter sizes, taken from the model when the user leaves them open.

DeepSpeed's defaults are made for models of billions of parameters: buckets of 5e8 elements, up
to 1e9 parameters kept gathered, and parameters not released when they will be used again within
1e9 elements. On a model of 50M parameters that means ZeRO-3 keeps the whole model gathered after
the first step and holds more memory than DDP (measured: 1.37x DDP's peak per rank).

Accelerate fills "auto" bucket sizes from the model (`hidden_size**2`, from a transformers config).
A plain torch model has no config, so here the unit is the model's largest parameter S (at least
2**20 elements): buckets, the prefetch, the live-parameter limit, the reuse distance and the
optimizer's sub-group are each S, never above DeepSpeed's default. Each then holds about one
parameter's worth, which is what lets ZeRO-3 release a layer after use, as FSDP's FULL_SHARD does.
The parameter persistence threshold keeps DeepSpeed's default (small tensors stay whole).
"""

from __future__ import annotations

from typing import Any, cast

AUTO = "auto"
FLOOR = 2**20
DEFAULTS = {  # DeepSpeed's documented defaults (elements)
    "reduce_bucket_size": 500_000_000,
    "allgather_bucket_size": 500_000_000,
    "stage3_prefetch_bucket_size": 50_000_000,
    "stage3_param_persistence_threshold": 100_000,
    "stage3_max_live_parameters": 1_000_000_000,
    "stage3_max_reuse_distance": 1_000_000_000,
    "sub_group_size": 1_000_000_000,
}
MODEL_SIZED = (
    "reduce_bucket_size",
    "allgather_bucket_size",
    "stage3_prefetch_bucket_size",
    "stage3_max_live_parameters",
    "stage3_max_reuse_distance",
    "sub_group_size",
)


def sized(key: str, largest_parameter: int) -> int:
    """The value for `key` on a model whose largest parameter has `largest_parameter` elements."""
    return min(DEFAULTS[key], max(int(largest_parameter), FLOOR))


def fill_sizes(zero: dict[str, Any], largest_parameter: int | None, *, from_file: bool) -> None:
    """A file's "auto" values become model-sized (or DeepSpeed's default when the model is not known
    yet); a config made from `deepspeed_config` fields gets model-sized values for every key."""
    for key, default in DEFAULTS.items():
        model_sized = largest_parameter is not None and key in MODEL_SIZED
        if from_file:
            if zero.get(key) == AUTO:
                zero[key] = sized(key, cast(int, largest_parameter)) if model_sized else default
        elif model_sized and key not in zero:
            zero[key] = sized(key, cast(int, largest_parameter))  # model_sized: not None
