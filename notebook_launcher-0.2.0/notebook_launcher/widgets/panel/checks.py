"""What the ConfigPanel checks beyond LaunchConfig: hardware limits and combinations, and its summary."""

from __future__ import annotations

import html
import importlib.util

from ...config import LaunchConfig
from ...system.hardware import HardwareInfo
from .fields import Field, key_of_error

STRATEGY_NAMES = {
    None: "auto",
    "NO": "single",
    "MULTI_CPU": "DDP (CPU)",
    "MULTI_GPU": "DDP (GPU)",
    "FSDP": "FSDP",
    "DEEPSPEED": "DeepSpeed",
}


def check_combinations(
    config: LaunchConfig, hardware: HardwareInfo, precision_reason: str | None
) -> tuple[dict[str, str], dict[str, str]]:
    """Hardware- and combination-dependent problems LaunchConfig cannot know about."""
    errors: dict[str, str] = {}
    warnings: dict[str, str] = {}
    hw = hardware
    processes = config.num_processes or 1
    per_machine = processes // config.num_machines
    cluster = config.cluster_config
    reason = precision_reason
    if reason:
        errors["mixed_precision"] = (
            f"mixed_precision={config.mixed_precision!r} is not available here: {reason}."
        )
    if config.distributed_type == "NO" and processes > 1:
        errors["num_processes"] = (
            f"num_processes={processes} with strategy 'single' runs one process; pick DDP, FSDP or "
            "DeepSpeed, or set processes to 1."
        )
    elif cluster.cluster_type != "local":
        if processes % cluster.num_nodes:
            errors["num_processes"] = (
                f"num_processes={processes} counts all ranks and must divide over the {cluster.num_nodes} nodes "
                f"of the {cluster.cluster_type} cluster; use a multiple of {cluster.num_nodes}."
            )  # (this machine's CPUs and GPUs do not limit a cluster launch)
    elif config.distributed_type == "MULTI_GPU" and per_machine > hw.cuda_device_count:
        errors["num_processes"] = (
            f"num_processes={processes} needs {per_machine} GPUs per machine and this one has "
            f"{hw.cuda_device_count}; use at most {hw.cuda_device_count} per machine, or tick 'CPU only'."
        )
    elif per_machine > hw.cpu_count:
        errors["num_processes"] = (
            f"num_processes={processes} puts {per_machine} processes on a machine with {hw.cpu_count} CPU "
            f"core(s); use at most {hw.cpu_count} per machine."
        )
    elif config.distributed_type in ("FSDP", "DEEPSPEED", "MULTI_CPU", "MULTI_GPU") and processes == 1:
        warnings["num_processes"] = "one process: nothing is replicated or sharded"
    ds = config.deepspeed_config
    if config.distributed_type == "DEEPSPEED":
        if importlib.util.find_spec("deepspeed") is None:
            warnings["distributed_type"] = (
                "DeepSpeed is not installed here (pip install deepspeed); you can still save"
            )
        if ds.offload_param_device != "none" and ds.zero_stage != 3 and not ds.deepspeed_config_file:
            errors["deepspeed_config.offload_param_device"] = (
                f"offload_param_device={ds.offload_param_device!r} needs zero_stage=3 (parameter offload is "
                "a ZeRO-3 feature); set the stage to 3 or offload to none."
            )
    if config.num_machines > 1 and not config.main_process_ip and cluster.cluster_type == "local":
        errors["main_process_ip"] = (
            f"main_process_ip is empty with num_machines={config.num_machines}; enter the address of machine 0."
        )
    return errors, warnings


def field_of(message: str) -> str:
    """The field a LaunchConfig error belongs next to (the missing layer classes, not the policy)."""
    if "needs fsdp_transformer_layer_cls_to_wrap" in message:
        return "fsdp_config.fsdp_transformer_layer_cls_to_wrap"
    return key_of_error(message) or "config"


def unsupported_precisions(hardware: HardwareInfo) -> dict[str, str]:
    return {mode: reason for mode, reason in hardware.supported_precisions().items() if reason is not None}


def summary_html(config: LaunchConfig | None, errors: dict[str, str], fields: dict[str, Field]) -> str:
    """The kernel's one-line reading of the form (also the echo browser tests wait for)."""
    if errors:
        unplaced = [message for key, message in errors.items() if key not in fields]
        extra = "".join(f"<br>{html.escape(m)}" for m in unplaced)
        return f'<span style="color:#c62828">✖ {len(errors)} setting(s) to fix (marked ✖){extra}</span>'
    assert config is not None
    seed = "none" if config.seed is None else config.seed
    machines = f" on {config.num_machines} machines" if config.num_machines > 1 else ""
    cluster = config.cluster_config
    if cluster.cluster_type != "local":
        machines = f" on {cluster.num_nodes} {'Ray' if cluster.cluster_type == 'ray' else 'SLURM'} node(s)"
    text = (
        f"→ {STRATEGY_NAMES[config.distributed_type]} · {config.mixed_precision} · "
        f"{config.num_processes} process(es){machines} · grad accumulation {config.gradient_accumulation_steps} · seed {seed}"
    )
    return f'<span style="color:#2e7d32">{html.escape(text)}</span>'
