"""The environment contract: how a launch config reaches every worker process.

The launcher sets the standard torch variables plus CONFIG_ENV holding the LaunchConfig as JSON,
and the ACCELERATE_*/FSDP_* variables HuggingFace's Accelerator reads (accelerate_env.py).
`Accelerator()` reads CONFIG_ENV back, else what `accelerate launch` set; with nothing set, a run
is a plain single process.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping

from ..records.names import CONFIG_ENV
from .accelerate_env import accelerate_env, config_from_accelerate_env
from .launch_config import LaunchConfig

# "1" in the workers of `notebook-launcher launch`: their Accelerator turns SIGTERM / SIGUSR1 into a
# graceful stop (runtime/world/preemption.py), as notebook_launch's workers do from their start.
TORCH_ENV_KEYS = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "GROUP_RANK",
)


def config_to_env(config: LaunchConfig, *, cpu_world: bool | None = None) -> dict[str, str]:
    """The variables that carry the config: ours (JSON, so any language or shell can read it) and,
    when cpu_world is known (the launcher knows whether the ranks run on CPUs), Accelerate's."""
    env = {CONFIG_ENV: json.dumps(config.to_dict(), sort_keys=True)}
    if cpu_world is not None:
        env.update(accelerate_env(config, cpu_world=cpu_world))
    return env


def config_from_env(environ: Mapping[str, str] | None = None) -> LaunchConfig | None:
    """The LaunchConfig this process was launched with (ours, else `accelerate launch`'s), or None."""
    environ = os.environ if environ is None else environ
    raw = environ.get(CONFIG_ENV)
    if not raw:
        return config_from_accelerate_env(environ)
    return LaunchConfig.from_dict(json.loads(raw), source=f"${CONFIG_ENV}")


def worker_env(
    *,
    rank: int,
    local_rank: int,
    world_size: int,
    local_world_size: int,
    group_rank: int,
    master_addr: str,
    master_port: int,
    config: LaunchConfig,
    cpu_world: bool | None = None,
    config_env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Every variable one worker needs, as strings (cpu_world: see config_to_env; config_env: that
    function's answer when the launcher already has it, the same for every rank of a launch)."""
    env = {
        "RANK": str(rank),
        "LOCAL_RANK": str(local_rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_WORLD_SIZE": str(local_world_size),
        "GROUP_RANK": str(group_rank),
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
    }
    env.update(config_to_env(config, cpu_world=cpu_world) if config_env is None else config_env)
    return env


@contextlib.contextmanager
def patched_environ(values: Mapping[str, str]) -> Iterator[None]:
    """Set variables for the duration of the block and restore the previous ones exactly after."""
    previous = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
