"""WHAT a run is launched with: LaunchConfig and its FSDP/DeepSpeed sections (launch_config.py,
sections.py), where it runs (cluster.py), Accelerate's enums (enums.py), YAML/JSON files (files.py) and the env contract that
carries a config into every worker (env.py).

Imports only errors and the standard library (torch never at module level): everyone may import it.
"""

from .cluster import CLUSTER_TYPES, ClusterConfig
from .env import CONFIG_ENV, config_from_env, config_to_env, patched_environ, worker_env
from .files import default_config_path, load_config, resolve_config, save_config, to_file_dict
from .launch_config import DISTRIBUTED_TYPES, MIXED_PRECISIONS, RDZV_BACKENDS, LaunchConfig
from .sections import DeepSpeedConfig, FSDPConfig

__all__ = [
    "CLUSTER_TYPES",
    "ClusterConfig",
    "CONFIG_ENV",
    "DISTRIBUTED_TYPES",
    "MIXED_PRECISIONS",
    "RDZV_BACKENDS",
    "DeepSpeedConfig",
    "FSDPConfig",
    "LaunchConfig",
    "config_from_env",
    "config_to_env",
    "default_config_path",
    "load_config",
    "patched_environ",
    "resolve_config",
    "save_config",
    "to_file_dict",
    "worker_env",
]
