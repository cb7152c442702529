"""zero3_init_flag: models built with transformers' `from_pretrained` come out already partitioned.

As in Accelerate, the flag registers the run's DeepSpeed config with transformers
(`HfDeepSpeedConfig`), which then builds models inside `deepspeed.zero.Init()`: each rank only ever
holds its partition, so a model larger than one process's memory can be loaded. It only means
something for ZeRO stage 3 (checked with the config) and needs transformers installed, which is an
error here rather than a flag silently doing nothing. A model built by plain torch code is not
affected (as in Accelerate); build it inside `deepspeed.zero.Init()` yourself for the same effect.
"""

from __future__ import annotations

import importlib
from typing import Any

from ....config import LaunchConfig
from ....errors import ConfigError
from .config import build_engine_config


def register_with_transformers(launch: LaunchConfig, world_size: int) -> Any:
    """The HfDeepSpeedConfig that makes transformers partition models at construction, or None when
    zero3_init_flag is off. Keep the returned object alive: transformers holds only a weak reference."""
    if not launch.deepspeed_config.zero3_init_flag:
        return None
    try:
        integrations = importlib.import_module("transformers.integrations")
        hf_config_class = integrations.HfDeepSpeedConfig
    except (ImportError, AttributeError) as exc:
        raise ConfigError(
            "deepspeed_config.zero3_init_flag=True makes transformers' from_pretrained build models already "
            f"partitioned, and needs transformers, which cannot be imported here ({exc}); run "
            "`pip install transformers`, or set zero3_init_flag=False."
        ) from None
    # Batch sizes are not known before prepare(); transformers only reads the ZeRO section.
    engine = build_engine_config(launch, micro_batch_size=1, world_size=world_size, client_optimizer=False)
    unset = getattr(integrations, "unset_hf_deepspeed_config", None)
    if unset is not None:
        unset()
    return hf_config_class(engine.config)
