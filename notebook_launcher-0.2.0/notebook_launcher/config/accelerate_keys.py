"""Keys of Accelerate's config files that have no LaunchConfig field, and what each one means here.

`accelerate config` writes them into every file (`accelerate config default` writes
`downcast_bf16: false`, `same_network: false`, `tpu_use_sudo: false`, ...). They must load quietly:
a value that changes nothing on the machines we launch on is accepted without a word; a value that
would change behaviour and that we cannot honour gets one plain line on stderr naming the key, so
the run is never silently different from what the file asks for.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


def _falsy(value: Any) -> bool:
    return value in (None, False, "no", "false", "False", "NO", 0, "", [], {})


def _any(_value: Any) -> bool:
    return True


# key -> (does this value change nothing here?, what happens instead when it would)
_ACCEPTED: dict[str, tuple[Callable[[Any], bool], str]] = {
    # Only Amazon SageMaker changes anything; we launch on the local machine(s).
    "compute_environment": (
        lambda v: v in (None, "LOCAL_MACHINE"),
        "SageMaker launching is not supported; the run starts on this machine",
    ),
    # TPU-only settings (bf16 downcasting, the function xmp.spawn calls, pod clusters): no TPU here.
    "downcast_bf16": (_any, ""),
    "main_training_function": (_any, ""),
    "tpu_env": (_any, ""),
    "tpu_name": (_any, ""),
    "tpu_zone": (_any, ""),
    "tpu_vm": (_any, ""),
    "tpu_use_cluster": (_any, ""),
    "tpu_use_sudo": (_any, ""),
    "commands": (_any, ""),
    "command_file": (_any, ""),
    # With or without it torchrun meets at main_process_ip:main_process_port (static rendezvous).
    "same_network": (_any, ""),
    "enable_cpu_affinity": (_falsy, "processes are not pinned to NUMA nodes"),
    "fp8_config": (
        _falsy,
        "fp8 runs through torchao with its default recipe (mixed_precision: fp8); the recipe keys are not read",
    ),
    "megatron_lm_config": (_falsy, "Megatron-LM is not supported; use FSDP or DeepSpeed"),
    "mpirun_config": (_falsy, "mpirun launching is not supported; processes start through torchrun"),
    "ipex_config": (_falsy, "Intel Extension for PyTorch is not applied"),
}

ACCELERATE_ONLY_KEYS = frozenset(_ACCEPTED)


def check_accelerate_key(key: str, value: Any, source: str, say: Callable[[str], None] | None = None) -> None:
    """Accept one of Accelerate's keys; print one plain line when its value cannot be honoured."""
    changes_nothing, instead = _ACCEPTED[key]
    if changes_nothing(value):
        return
    line = f"notebook_launcher: {source}: {key}={value!r} is not honoured: {instead}."
    (say or _stderr_line)(line)


def _stderr_line(line: str) -> None:
    print(line, file=sys.stderr)
