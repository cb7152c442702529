"""`notebook-launcher config`: ask the questions that make a config file, on plain stdin/stdout.

Every question shows its default in brackets; an empty answer takes it. A wrong answer is explained
and the question asked again. The questions read lines, not key presses, so the whole exchange can
be scripted: `printf '1\\nyes\\n2\\n...' | notebook-launcher config --config_file my.yaml`. If the
input ends before the last question, nothing is written and the command fails naming the question.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TextIO

from ..config import LaunchConfig
from ..config.launch_config import MIXED_PRECISIONS, RDZV_BACKENDS
from ..config.parallelism import check_section
from ..config.pipeline import SCHEDULES, SINGLE_STAGE, V_SHAPED
from ..config.sections import (
    FSDP_SHARDING_STRATEGIES,
    FSDP_STATE_DICT_TYPES,
    FSDP_WRAP_POLICIES,
    OFFLOAD_DEVICES,
)
from ..errors import ConfigError
from ..records.names import DEFAULT_PORT
from .flags import UsageError, boolean, choice, count, gpu_ids, layer_classes, port, positive_float

_REQUIRED = object()


class Asker:
    """Asks one question at a time on `stdin`/`stdout` and converts the answer."""

    def __init__(self, stdin: TextIO, stdout: TextIO) -> None:
        self.stdin = stdin
        self.stdout = stdout
        self.echo = not (hasattr(stdin, "isatty") and stdin.isatty())

    def ask(self, question: str, convert: Callable[[str], Any], default: Any = _REQUIRED) -> Any:
        shown = "" if default is _REQUIRED else f" [{_show(default)}]"
        while True:
            self.stdout.write(f"{question}{shown}: ")
            self.stdout.flush()
            line = self.stdin.readline()
            if line == "":
                self.stdout.write("\n")
                raise UsageError(
                    f"the input ended before this question was answered: {question!r}. Nothing was written."
                )
            answer = line.strip()
            if self.echo:
                self.stdout.write(answer + "\n")
            if not answer:
                if default is _REQUIRED:
                    self.stdout.write("  An answer is needed here.\n")
                    continue
                return default
            try:
                return convert(answer)
            except (argparse.ArgumentTypeError, ValueError) as exc:
                self.stdout.write(f"  {exc}. Please answer again.\n")


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return "none" if value is None else str(value)


def _optional(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    def wrapped(text: str) -> Any:
        return None if text.lower() in ("none", "-") else convert(text)

    return wrapped


def _text(text: str) -> str:
    return text


def ask_config(asker: Asker, hardware: Any) -> LaunchConfig:
    """Ask every question that applies and return the validated config."""
    data: dict[str, Any] = {}
    machines = data["num_machines"] = asker.ask("How many machines will take part?", count(1), 1)
    if machines > 1:
        data["machine_rank"] = asker.ask(
            f"What is the rank of this machine (0 to {machines - 1})?", _below(machines), 0
        )
        data["main_process_ip"] = asker.ask("What is the IP address of machine 0?", _text)
        data["main_process_port"] = asker.ask(
            "Which port on machine 0 should the rendezvous use?", port, DEFAULT_PORT
        )
        data["rdzv_backend"] = asker.ask(
            "Which rendezvous backend (static, c10d)?", choice(RDZV_BACKENDS), "static"
        )
    gpus = hardware.cuda_device_count
    data["use_cpu"] = asker.ask("Run on CPU only, even if GPUs are present? (yes/no)", boolean, gpus == 0)
    on_gpu = gpus > 0 and not data["use_cpu"]
    if on_gpu:
        ids = asker.ask("Which GPUs should this machine use (e.g. 0,1, or all)?", gpu_ids, "all")
        data["gpu_ids"] = None if ids == "all" else ids
    per_machine = (len(data["gpu_ids"].split(",")) if data.get("gpu_ids") else gpus) if on_gpu else 1
    data["num_processes"] = asker.ask(
        "How many processes in total, over all machines?", _multiple_of(machines), machines * per_machine
    )
    strategy = asker.ask(
        "Which strategy: ddp (replicate the model), fsdp or deepspeed (shard it), mesh (pipeline stages x "
        "tensor parallel x FSDP2)?",
        choice(("ddp", "fsdp", "deepspeed", "mesh")),
        "ddp",
    )
    if strategy == "mesh":
        data["parallelism_config"] = _ask_mesh(asker, data["num_processes"])
        shards = data["parallelism_config"]["parallelism_config_dp_shard_size"] > 1
        data["distributed_type"] = "FSDP" if shards else ("MULTI_GPU" if on_gpu else "MULTI_CPU")
    elif strategy == "fsdp":
        data["distributed_type"] = "FSDP"
        data["fsdp_config"] = _ask_fsdp(asker)
    elif strategy == "deepspeed":
        data["distributed_type"] = "DEEPSPEED"
        data["deepspeed_config"] = _ask_deepspeed(asker)
    elif data["num_processes"] > 1:
        data["distributed_type"] = "MULTI_GPU" if on_gpu else "MULTI_CPU"
    else:
        data["distributed_type"] = "NO"
    data["mixed_precision"] = asker.ask(
        "Mixed precision (no, fp16, bf16, fp8)?", choice(MIXED_PRECISIONS), "no"
    )
    data["gradient_accumulation_steps"] = asker.ask("How many batches per optimizer step?", count(1), 1)
    data["debug"] = asker.ask(
        "Check collective operations for mismatches (debug mode)? (yes/no)", boolean, False
    )
    return LaunchConfig.from_dict(data, source="the answers")


def _ask_fsdp(asker: Asker) -> dict[str, Any]:
    fsdp: dict[str, Any] = {}
    fsdp["fsdp_sharding_strategy"] = asker.ask(
        f"FSDP sharding strategy ({', '.join(FSDP_SHARDING_STRATEGIES)})?",
        choice(FSDP_SHARDING_STRATEGIES),
        "FULL_SHARD",
    )
    policy = fsdp["fsdp_auto_wrap_policy"] = asker.ask(
        f"Auto wrap policy ({', '.join(FSDP_WRAP_POLICIES)})?",
        choice(FSDP_WRAP_POLICIES),
        "TRANSFORMER_BASED_WRAP",
    )
    if policy == "TRANSFORMER_BASED_WRAP":
        fsdp["fsdp_transformer_layer_cls_to_wrap"] = asker.ask(
            "Which layer classes should be wrapped (comma-separated, e.g. GPT2Block)?", layer_classes
        )
    elif policy == "SIZE_BASED_WRAP":
        fsdp["fsdp_min_num_params"] = asker.ask(
            "Minimum number of parameters per wrapped unit?", count(0), 100_000_000
        )
    fsdp["fsdp_offload_params"] = asker.ask(
        "Offload parameters and gradients to CPU? (yes/no)", boolean, False
    )
    fsdp["fsdp_state_dict_type"] = asker.ask(
        f"State dict type ({', '.join(FSDP_STATE_DICT_TYPES)})?",
        choice(FSDP_STATE_DICT_TYPES),
        "FULL_STATE_DICT",
    )
    fsdp["fsdp_activation_checkpointing"] = asker.ask(
        "Use activation checkpointing? (yes/no)", boolean, False
    )
    return fsdp


def _ask_mesh(asker: Asker, processes: int) -> dict[str, Any]:
    """The ParallelismConfig sizes (and pipeline settings), asked until their product is the number
    of processes and the pipeline's settings fit its sizes."""
    prefix = "parallelism_config_"
    while True:
        pp = asker.ask("Pipeline stages (pp_size: ranks the layers are cut over; 1 for none)?", count(1), 1)
        pipeline = _ask_pipeline(asker) if pp > 1 else {}
        rest = max(processes // pp, 1)
        tp = asker.ask("Tensor-parallel size (ranks each layer is split over)?", count(1), min(2, rest))
        replicate = asker.ask("Data-parallel replicas (dp_replicate_size; HSDP with shards)?", count(1), 1)
        shard = asker.ask(
            "FSDP2 shards (dp_shard_size)?", count(1), max(processes // max(pp * tp * replicate, 1), 1)
        )
        section = {
            f"{prefix}dp_replicate_size": replicate,
            f"{prefix}dp_shard_size": shard,
            f"{prefix}tp_size": tp,
            f"{prefix}cp_size": 1,
            **({f"{prefix}pp_size": pp, **{prefix + k: v for k, v in pipeline.items()}} if pp > 1 else {}),
        }
        product = pp * tp * replicate * shard
        if product != processes:
            sizes = (f"pp_size={pp} x " if pp > 1 else "") + f"tp_size={tp} x dp_replicate_size={replicate}"
            asker.stdout.write(
                f"  {sizes} x dp_shard_size={shard} = {product}, but there are {processes} processes; the "
                "product must equal it. Please answer again.\n"
            )
            continue
        try:
            check_section(section)  # the pipeline's own rules (micro-batches, split points, ...)
        except ConfigError as exc:
            asker.stdout.write(f"  {exc} Please answer again.\n")
            continue
        return section


def _ask_pipeline(asker: Asker) -> dict[str, Any]:
    """The pipeline settings (TorchPipelineParallelConfig) under their YAML keys, unset ones left out."""
    schedule = asker.ask(f"Pipeline schedule ({', '.join(SCHEDULES)})?", choice(tuple(SCHEDULES)), "1f1b")
    answers: dict[str, Any] = {"pp_schedule": schedule}
    answers["pp_n_microbatches"] = asker.ask(
        "Micro-batches per batch (a number, or none for one per stage)?", _optional(count(1)), None
    )
    if schedule not in SINGLE_STAGE and schedule not in V_SHAPED:
        answers["pp_virtual_stages"] = asker.ask("Stages per rank (virtual_stages)?", count(2), 2)
    points = asker.ask(
        "Where new stages begin (block names, comma-separated, e.g. layers.4; none for an even split)?",
        _optional(_text),
        None,
    )
    answers["pp_split_points"] = [p.strip() for p in points.split(",") if p.strip()] if points else None
    return {k: v for k, v in answers.items() if v is not None}


def _ask_deepspeed(asker: Asker) -> dict[str, Any]:
    path = asker.ask(
        "DeepSpeed JSON config file (a path, or none to answer the questions here)?", _optional(_text), None
    )
    if path:
        return {"deepspeed_config_file": path}
    ds: dict[str, Any] = {}
    stage = ds["zero_stage"] = asker.ask("ZeRO stage (0, 1, 2, 3)?", choice((0, 1, 2, 3)), 2)
    ds["offload_optimizer_device"] = asker.ask(
        "Where should optimizer states live (none, cpu, nvme)?", choice(OFFLOAD_DEVICES), "none"
    )
    if stage == 3:
        ds["offload_param_device"] = asker.ask(
            "Where should parameters live (none, cpu, nvme)?", choice(OFFLOAD_DEVICES), "none"
        )
    ds["gradient_clipping"] = asker.ask(
        "Clip gradients to which norm (a number, or none)?", _optional(positive_float), None
    )
    return ds


def _below(limit: int) -> Callable[[str], int]:
    def convert(text: str) -> int:
        value = count(0)(text)
        if value >= limit:
            raise argparse.ArgumentTypeError(
                f"{value} is not below {limit}; machine ranks go from 0 to {limit - 1}"
            )
        return value

    return convert


def _multiple_of(machines: int) -> Callable[[str], int]:
    def convert(text: str) -> int:
        value = count(1)(text)
        if value % machines:
            raise argparse.ArgumentTypeError(
                f"{value} is not divisible by {machines} machines; every machine runs the same number of processes"
            )
        return value

    return convert
