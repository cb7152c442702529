"""zero3_init_flag: models come out of construction already partitioned.

As in Accelerate, the flag registers the run's DeepSpeed config with transformers
(`HfDeepSpeedConfig`), which then builds `from_pretrained` models inside `deepspeed.zero.Init()`:
each rank only ever holds its partition, so a model larger than one process's memory can be
loaded. A model built by plain torch code gets the same inside `accelerator.sharded_init()`
(deepspeed/sharded_init.py). It only means something for ZeRO stage 3 (checked with the config).
Without transformers installed the registration is skipped (the flag still acts through
`sharded_init()`); a model that reaches `prepare` unpartitioned while the flag is on is reported.
"""

from __future__ import annotations

import importlib
from typing import Any

from ....config import LaunchConfig
from .config import build_engine_config


def register_with_transformers(launch: LaunchConfig, world_size: int) -> Any:
    """The HfDeepSpeedConfig that makes transformers partition models at construction, or None when
    zero3_init_flag is off or transformers is not installed. Keep the returned object alive:
    transformers holds only a weak reference."""
    if not launch.deepspeed_config.zero3_init_flag:
        return None
    try:
        integrations = importlib.import_module("transformers.integrations")
        hf_config_class = integrations.HfDeepSpeedConfig
    except (ImportError, AttributeError):
        return None  # no transformers: models built in accelerator.sharded_init() get zero.Init
    # Batch sizes are not known before prepare(); transformers only reads the ZeRO section.
    engine = build_engine_config(launch, micro_batch_size=1, world_size=world_size, client_optimizer=False)
    unset = getattr(integrations, "unset_hf_deepspeed_config", None)
    if unset is not None:
        unset()
    return hf_config_class(engine.config)
