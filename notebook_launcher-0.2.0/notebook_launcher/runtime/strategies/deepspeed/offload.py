"""ZeRO-Offload: the optimizer step runs on the CPU, where DeepSpeed wants its own C++ Adam.

DeepSpeed refuses a plain torch optimizer together with `offload_optimizer` (it would be slow).
So, as Accelerate does, torch's Adam / AdamW become `DeepSpeedCPUAdam` with the same parameter
groups and hyperparameters (AdamW's decoupled weight decay or Adam's L2 kept). The user's optimizer
object then shares the new optimizer's parameter groups, so a scheduler built on it still sets the
learning rate that is used. Any other optimizer is kept as it is (correct, only slower), with
DeepSpeed's `zero_force_ds_cpu_optimizer` check switched off.

DeepSpeedCPUAdam is a C++ extension compiled on first use (~2 minutes, cached in
~/.cache/torch_extensions).
"""

from __future__ import annotations

from typing import Any

import torch

OFFLOAD_DEVICES = ("cpu", "nvme")


def offloads_optimizer(config: dict[str, Any]) -> bool:
    zero = config.get("zero_optimization", {})
    return (zero.get("offload_optimizer") or {}).get("device") in OFFLOAD_DEVICES


def optimizer_for_offload(optimizer: torch.optim.Optimizer | None, config: dict[str, Any]) -> Any:
    """The optimizer to give DeepSpeed when its config offloads the optimizer (config may be updated)."""
    if optimizer is None or not offloads_optimizer(config):
        return optimizer
    if type(optimizer) not in (torch.optim.Adam, torch.optim.AdamW) or any(
        g.get("amsgrad") for g in optimizer.param_groups
    ):
        config["zero_force_ds_cpu_optimizer"] = False
        return optimizer
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    defaults = optimizer.defaults
    cpu_adam = DeepSpeedCPUAdam(
        optimizer.param_groups,
        lr=defaults["lr"],
        betas=defaults["betas"],
        eps=defaults["eps"],
        weight_decay=defaults["weight_decay"],
        adamw_mode=isinstance(optimizer, torch.optim.AdamW),
    )
    optimizer.param_groups = cpu_adam.param_groups  # a scheduler of the user's optimizer reaches CPU Adam
    return cpu_adam
