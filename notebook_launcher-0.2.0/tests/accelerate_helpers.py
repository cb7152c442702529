"""Helpers for the tests that run HuggingFace Accelerate itself (no tests here): `accelerate launch` in
a subprocess, the environment its launcher would give workers, and workers that build HF's own
Accelerator inside our launches."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from test_cli_helpers import cli_env, finish

ACCELERATE_CLI = [sys.executable, "-m", "accelerate.commands.accelerate_cli"]


def accelerate_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """cli_env plus an empty HF_HOME (no user's accelerate config). A CPU-only machine needs
    ACCELERATE_USE_CPU=true for `accelerate launch --multi_gpu` to give more than one process a world."""
    env = cli_env(tmp_path, HF_HOME=str(tmp_path / "hf_home"), ACCELERATE_USE_CPU="true", OMP_NUM_THREADS="1")
    env.update(extra)
    return env


def accelerate_launch(args: list[str], *, cwd: Path, env: dict[str, str], timeout: float = 240):
    proc = subprocess.Popen(
        [*ACCELERATE_CLI, "launch", *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    return finish(proc, timeout=timeout)


def two_cpu_processes(mixed_precision: str, dynamo_backend: str, port: int) -> list[str]:
    """`accelerate launch`'s flags for two processes on this machine (before the script)."""
    flags = {"num_processes": "2", "num_machines": "1", "mixed_precision": mixed_precision}
    flags |= {"dynamo_backend": dynamo_backend, "main_process_port": str(port)}
    return ["--multi_gpu", *(part for name, value in flags.items() for part in (f"--{name}", value))]


def launcher_variables(argv: list[str], tmp_path: Path) -> dict[str, str]:
    """The ACCELERATE_*/FSDP_* variables `accelerate launch ARGV script.py` gives its workers, computed by
    Accelerate's own launcher code (accelerate/utils/launch.py) without starting anything."""
    os.environ["HF_HOME"] = str(tmp_path / "hf_home")  # no user config; restored by monkeypatch in tests
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_deepspeed_cmd_env, prepare_multi_gpu_env

    args, _, _ = _validate_launch_command(launch_command_parser().parse_args([*argv, "script.py"]))
    if args.use_deepspeed:
        args.deepspeed_fields_from_accelerate_config = ""
        env = prepare_deepspeed_cmd_env(args)[1]
    else:
        env = prepare_multi_gpu_env(args)
    return {k: v for k, v in env.items() if k.startswith(("ACCELERATE_", "FSDP_"))}


def hf_accelerator_report() -> dict:
    """Inside one of our workers: what HuggingFace's own Accelerator() makes of the launch."""
    import torch
    from accelerate import Accelerator
    from accelerate.utils import FullyShardedDataParallelPlugin

    acc = Accelerator()
    total = acc.reduce(torch.tensor([float(acc.process_index + 1)]), reduction="sum").item()
    report = {
        "processes": acc.num_processes,
        "index": acc.process_index,
        "distributed_type": str(acc.distributed_type.value),
        "mixed_precision": acc.mixed_precision,
        "accumulation": acc.gradient_accumulation_steps,
        "sum_of_ranks": total,
    }
    if os.environ.get("ACCELERATE_USE_FSDP") == "true":
        plugin = FullyShardedDataParallelPlugin()  # Accelerate fills every field from FSDP_*
        report["fsdp"] = {
            "version": plugin.fsdp_version,
            "reshard_after_forward": plugin.reshard_after_forward,
            "cpu_offload": bool(getattr(plugin.cpu_offload, "offload_params", plugin.cpu_offload)),
        }
    acc.wait_for_everyone()
    return report


HF_SCRIPT = """
import json, sys
sys.path.insert(0, {tests!r})
from accelerate_helpers import hf_accelerator_report
report = hf_accelerator_report()
open(sys.argv[1] + f".{{report['index']}}.json", "w").write(json.dumps(report))
"""

OURS_SCRIPT = """
import json, sys
import torch
from torch import nn
from notebook_launcher import Accelerator

acc = Accelerator()
model = acc.prepare(nn.Linear(4, 4))
with acc.autocast():
    dtype = torch.mm(torch.ones(2, 2), torch.ones(2, 2)).dtype
total = acc.reduce(torch.tensor([float(acc.process_index + 1)]), "sum").item()
report = dict(
    processes=acc.num_processes, index=acc.process_index, precision=acc.mixed_precision,
    distributed_type=str(acc.distributed_type), compiled=hasattr(model, "_orig_mod"),
    autocast_dtype=str(dtype), sum_of_ranks=total, device=str(acc.device),
)
open(sys.argv[1] + f".{acc.process_index}.json", "w").write(json.dumps(report))
acc.end_training()
"""


def reports(prefix: Path, ranks: int = 2) -> list[dict]:
    return [json.loads(Path(f"{prefix}.{rank}.json").read_text()) for rank in range(ranks)]
