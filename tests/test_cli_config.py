"""`config` (questionnaire on stdin, default, show), `env` and `test`, through the real CLI."""

from __future__ import annotations

import pytest
import yaml
from test_cli_helpers import cli_env, explain, run_cli

from notebook_launcher.config import LaunchConfig, load_config


def test_questionnaire_fsdp_round_trips_into_the_same_config(tmp_path):
    answers = [
        "",  # machines: default 1
        "yes",  # CPU only
        "2",  # processes
        "fsdp",
        "SHARD_GRAD_OP",
        "TRANSFORMER_BASED_WRAP",
        "TransformerEncoderLayer,GPT2Block",
        "yes",  # offload params
        "",  # state dict type: default
        "no",  # activation checkpointing
        "bf16",
        "4",  # gradient accumulation
        "no",  # debug
    ]
    path = tmp_path / "out" / "fsdp.yaml"
    result = run_cli(["config", "--config_file", str(path)], cwd=tmp_path, stdin="\n".join(answers) + "\n")
    assert result.returncode == 0, explain(result)
    expected = LaunchConfig.from_dict(
        {
            "num_processes": 2,
            "use_cpu": True,
            "distributed_type": "FSDP",
            "mixed_precision": "bf16",
            "gradient_accumulation_steps": 4,
            "fsdp_config": {
                "fsdp_sharding_strategy": "SHARD_GRAD_OP",
                "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                "fsdp_transformer_layer_cls_to_wrap": "TransformerEncoderLayer,GPT2Block",
                "fsdp_offload_params": True,
            },
        }
    )
    assert load_config(path) == expected
    assert yaml.safe_load(path.read_text())["compute_environment"] == "LOCAL_MACHINE"  # Accelerate's layout
    assert f"Config written to {path}" in result.stdout


def test_questionnaire_multi_machine_deepspeed_reasks_wrong_answers(tmp_path):
    answers = [
        "2",  # machines
        "5",  # machine rank: out of range -> asked again
        "1",
        "10.1.2.3",
        "",  # port: default 29500
        "c10d",
        "",  # CPU only: default yes (no GPU here)
        "3",  # processes: not divisible by 2 -> asked again
        "4",
        "deepspeed",
        "",  # no DeepSpeed file
        "9",  # ZeRO stage: invalid -> asked again
        "3",
        "cpu",
        "none",
        "1.5",  # gradient clipping
        "fp16",
        "",
        "yes",  # debug
    ]
    path = tmp_path / "ds.yaml"
    result = run_cli(["config", "--config-file", str(path)], cwd=tmp_path, stdin="\n".join(answers) + "\n")
    assert result.returncode == 0, explain(result)
    assert result.stdout.count("Please answer again") == 3, explain(result)
    assert "5 is not below 2" in result.stdout and "3 is not divisible by 2 machines" in result.stdout
    expected = LaunchConfig.from_dict(
        {
            "num_machines": 2,
            "machine_rank": 1,
            "main_process_ip": "10.1.2.3",
            "main_process_port": 29500,
            "rdzv_backend": "c10d",
            "use_cpu": True,
            "num_processes": 4,
            "distributed_type": "DEEPSPEED",
            "mixed_precision": "fp16",
            "debug": True,
            "deepspeed_config": {
                "zero_stage": 3,
                "offload_optimizer_device": "cpu",
                "offload_param_device": "none",
                "gradient_clipping": 1.5,
            },
        }
    )
    assert load_config(path) == expected


def test_questionnaire_with_too_few_answers_writes_nothing(tmp_path):
    path = tmp_path / "partial.yaml"
    result = run_cli(["config", "--config_file", str(path)], cwd=tmp_path, stdin="1\nyes\n")
    assert result.returncode == 2, explain(result)
    assert "the input ended before this question was answered" in result.stderr
    assert "Traceback" not in result.stderr and not path.exists()


def test_launch_generate_config_writes_the_file_then_launches_with_it(tmp_path):
    (tmp_path / "show.py").write_text(
        "import json, os; c = json.loads(os.environ['NOTEBOOK_LAUNCHER_LAUNCH_CONFIG']); "
        "print('accum', c['gradient_accumulation_steps'], 'world', os.environ['WORLD_SIZE'])\n"
    )
    path = tmp_path / "accelerate_config.yaml"
    answers = "\n".join(["1", "yes", "1", "ddp", "no", "6", "no"]) + "\n"
    args = ["launch", "--config_file", str(path), "--generate_config", "show.py"]
    result = run_cli(args, cwd=tmp_path, stdin=answers)
    assert result.returncode == 0, explain(result)
    assert load_config(path) == LaunchConfig(
        num_processes=1, use_cpu=True, distributed_type="NO", gradient_accumulation_steps=6
    )
    assert "accum 6 world 1" in result.stdout, explain(result)


def test_config_default_then_show_uses_the_per_user_file(tmp_path):
    env = cli_env(tmp_path)
    default_file = tmp_path / "xdg" / "notebook_launcher" / "default_config.yaml"
    result = run_cli(["config", "default"], cwd=tmp_path, env=env)
    assert result.returncode == 0, explain(result)
    assert load_config(default_file) == LaunchConfig(num_processes=1, distributed_type="NO", use_cpu=True)
    again = run_cli(["config", "default"], cwd=tmp_path, env=env)
    assert again.returncode == 2 and "already exists; pass --force" in again.stderr, explain(again)
    default_file.write_text("num_processes: 2\nmixed_precision: bf16\n")
    shown = run_cli(["config", "show"], cwd=tmp_path, env=env)
    assert shown.returncode == 0, explain(shown)
    assert str(default_file) in shown.stdout
    data = yaml.safe_load(shown.stdout)
    assert data["num_processes"] == 2 and data["mixed_precision"] == "bf16"
    assert data["distributed_type"] == "MULTI_CPU"  # filled in
    assert (
        data["main_process_port"] is None
        and "main_process_port unset: any free port on one machine" in shown.stdout
    )


def test_env_report_has_versions_hardware_and_config_even_when_the_config_is_broken(tmp_path):
    (tmp_path / "bad.yaml").write_text("num_proceses: 2\n")
    result = run_cli(["env", "--config_file", "bad.yaml"], cwd=tmp_path)
    assert result.returncode == 0, explain(result)
    import torch

    assert f"- torch version: {torch.__version__}" in result.stdout
    assert "- notebook_launcher version: " in result.stdout and "- CPUs usable: " in result.stdout
    assert "- torch distributed: available: gloo" in result.stdout
    assert "Config: could not be read" in result.stdout and "num_proceses" in result.stdout


@pytest.mark.slow
def test_builtin_sanity_test_passes_on_two_processes(tmp_path):
    # No config file and no GPU: two processes, as notebook_launch's default (one would test nothing distributed).
    result = run_cli(["test"], cwd=tmp_path, timeout=120)
    assert result.returncode == 0, explain(result)
    assert "notebook-launcher test: 2 process(es)" in result.stdout
    assert "weights identical on every rank" in result.stdout
    assert "distributed training works here (2 processes, MULTI_CPU)." in result.stdout
