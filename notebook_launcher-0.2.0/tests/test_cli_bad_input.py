"""Bad input to the CLI: exit status 2, one message naming the problem, no Python traceback."""

from __future__ import annotations

import os

import pytest
from test_cli_helpers import cli_env, explain, run_cli

# (id, command line, files to create {name: text}, fragments the message must contain)
CASES = [
    ("unknown-flag", ["launch", "--num_process", "2", "ok.py"], {}, ["'--num_process'", "Did you mean '--num_processes'"]),
    ("unknown-command", ["lanch", "ok.py"], {}, ["unknown command 'lanch'", "Did you mean 'launch'"]),
    ("non-integer-processes", ["launch", "--num_processes", "two", "ok.py"], {}, ["--num_processes", "'two' is not a whole number"]),
    ("zero-processes", ["launch", "--num_processes", "0", "ok.py"], {}, ["--num_processes", "at least 1"]),
    ("non-integer-machines", ["launch", "--num-machines", "1.5", "ok.py"], {}, ["--num_machines", "'1.5'"]),
    ("port-out-of-range", ["launch", "--main_process_port", "70000", "ok.py"], {}, ["--main_process_port", "70000", "0 (pick a free one) to 65535"]),
    ("port-not-a-number", ["launch", "--main_process_port", "http", "ok.py"], {}, ["--main_process_port", "'http' is not a port"]),
    ("bad-precision", ["launch", "--mixed_precision", "fp7", "ok.py"], {}, ["--mixed_precision", "'fp7'", "Did you mean 'fp8'"]),
    ("bad-rdzv-backend", ["launch", "--rdzv_backend", "etcd", "ok.py"], {}, ["--rdzv_backend", "'etcd' is not one of static, c10d"]),
    ("fsdp-and-deepspeed", ["launch", "--use_fsdp", "--use_deepspeed", "ok.py"], {}, ["--use_fsdp and --use_deepspeed cannot be combined"]),
    ("multi-gpu-and-cpu", ["launch", "--multi_gpu", "--cpu", "ok.py"], {}, ["--multi_gpu and --cpu"]),
    ("fsdp-flag-without-fsdp", ["launch", "--fsdp_sharding_strategy", "FULL_SHARD", "ok.py"], {}, ["--fsdp_sharding_strategy applies only to distributed_type FSDP", "--use_fsdp"]),
    ("zero-stage-without-deepspeed", ["launch", "--zero_stage", "3", "ok.py"], {}, ["--zero_stage applies only to distributed_type DEEPSPEED", "--use_deepspeed"]),
    ("bad-sharding-strategy", ["launch", "--use_fsdp", "--fsdp_sharding_strategy", "FULL", "ok.py"], {}, ["--fsdp_sharding_strategy", "'FULL' is not one of"]),
    ("bad-zero-stage", ["launch", "--use_deepspeed", "--zero_stage", "5", "ok.py"], {}, ["--zero_stage", "'5' is not one of 0, 1, 2, 3"]),
    ("bad-bool", ["launch", "--use_fsdp", "--fsdp_offload_params", "maybe", "ok.py"], {}, ["--fsdp_offload_params", "expected true or false, got 'maybe'"]),
    ("bad-layer-classes", ["launch", "--use_fsdp", "--fsdp_transformer_layer_cls_to_wrap", "GPT2 Block", "ok.py"], {}, ["--fsdp_transformer_layer_cls_to_wrap", "class names"]),
    ("zero-monitor-interval", ["launch", "--monitor_interval", "0", "ok.py"], {}, ["--monitor_interval", "greater than 0"]),
    ("bad-gpu-ids", ["launch", "--gpu_ids", "a,b", "ok.py"], {}, ["--gpu_ids", "'a,b'"]),
    ("bad-tee", ["launch", "--tee", "7", "ok.py"], {}, ["--tee", "'7' is not a stream selection"]),
    ("missing-script", ["launch", "--num_processes", "2"], {}, ["missing the script to run"]),
    ("script-does-not-exist", ["launch", "nothere.py"], {}, ["script 'nothere.py' does not exist"]),
    ("module-does-not-exist", ["launch", "-m", "no_such_module_xyz"], {}, ["module 'no_such_module_xyz' cannot be found"]),
    ("not-divisible", ["launch", "--num_processes", "3", "--num_machines", "2", "--main_process_ip", "127.0.0.1", "ok.py"], {}, ["num_processes=3", "divisible by num_machines=2"]),
    ("machine-rank-out-of-range", ["launch", "--num_machines", "2", "--machine_rank", "2", "--main_process_ip", "10.0.0.1", "ok.py"], {}, ["machine_rank=2", "between 0 and num_machines-1"]),
    ("machines-without-ip", ["launch", "--num_machines", "2", "--num_processes", "2", "ok.py"], {}, ["main_process_ip", "machine 0"]),
    ("multi-machine-port-zero", ["launch", "--num_machines", "2", "--main_process_ip", "10.0.0.1", "--main_process_port", "0", "ok.py"], {}, ["main_process_port=0", "same port"]),
    ("deepspeed-file-missing", ["launch", "--deepspeed", "nothere.json", "ok.py"], {}, ["DeepSpeed config file 'nothere.json' does not exist"]),
    ("config-file-missing", ["launch", "--config_file", "nothere.yaml", "ok.py"], {}, ["'nothere.yaml' does not exist", "notebook-launcher config"]),
    ("config-unknown-key", ["launch", "--config_file", "c.yaml", "ok.py"], {"c.yaml": "num_proceses: 2\n"}, ["Unknown key 'num_proceses'", "Did you mean 'num_processes'"]),
    ("config-wrong-type", ["launch", "--config_file", "c.yaml", "ok.py"], {"c.yaml": "num_processes: many\n"}, ["num_processes='many'", "expected int"]),
    ("config-bad-value", ["launch", "--config_file", "c.yaml", "ok.py"], {"c.yaml": "mixed_precision: fp7\n"}, ["mixed_precision='fp7'", "allowed values", "'bf16'"]),
    ("config-bad-section-value", ["launch", "--config_file", "c.yaml", "ok.py"], {"c.yaml": "distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: HALF\n"}, ["fsdp_config.fsdp_sharding_strategy='HALF'"]),
    ("config-invalid-yaml", ["launch", "--config_file", "c.yaml", "ok.py"], {"c.yaml": "num_processes: 2\nmixed_precision: [bf16\n"}, ["not valid YAML at line 3"]),
    ("config-unknown-action", ["config", "shwo"], {}, ["unknown config action 'shwo'", "Did you mean 'show'"]),
]  # fmt: skip


@pytest.mark.parametrize("argv, files, fragments", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_exits_2_with_one_clear_message(tmp_path, argv, files, fragments):
    (tmp_path / "ok.py").write_text("raise SystemExit('the script must not run on bad input')\n")
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    result = run_cli(argv, cwd=tmp_path, timeout=60)
    assert result.returncode == 2, explain(result)
    assert "Traceback" not in result.stderr and result.stdout == "", explain(result)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("notebook-launcher"), explain(result)
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} missing from: {lines[0]}"
    assert not lines[0].endswith(("?.", "..")), f"doubled punctuation at the end: {lines[0]}"


def test_fp8_without_a_capable_gpu_is_refused_before_anything_starts(tmp_path):
    from notebook_launcher.system.hardware import detect

    if detect().fp8_supported:
        pytest.skip("this machine can run fp8")
    (tmp_path / "ok.py").write_text("raise SystemExit('must not run')\n")
    result = run_cli(["launch", "--mixed_precision", "fp8", "ok.py"], cwd=tmp_path, timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr, explain(result)
    assert "mixed_precision='fp8' needs CUDA GPUs of compute capability 8.9+" in result.stderr
    assert "--mixed_precision bf16" in result.stderr


def test_multi_gpu_without_gpus_is_refused(tmp_path):
    from notebook_launcher.system.hardware import detect

    if detect().has_cuda:
        pytest.skip("this machine has GPUs")
    (tmp_path / "ok.py").write_text("raise SystemExit('must not run')\n")
    result = run_cli(["launch", "--multi_gpu", "ok.py"], cwd=tmp_path, timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr, explain(result)
    assert "MULTI_GPU needs CUDA GPUs" in result.stderr and "--cpu" in result.stderr


def test_deepspeed_without_the_package_is_refused(tmp_path):
    """As on a machine without deepspeed, whether or not this one has it: a sitecustomize on the
    CLI's PYTHONPATH makes `deepspeed` unimportable (find_spec None, import ModuleNotFoundError)."""
    hide = tmp_path / "no_deepspeed"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['deepspeed'] = None\n")
    env = cli_env(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(hide), env.get("PYTHONPATH", "")) if p)
    (tmp_path / "ok.py").write_text("raise SystemExit('must not run')\n")
    result = run_cli(
        ["launch", "--use_deepspeed", "--zero_stage", "3", "ok.py"], cwd=tmp_path, env=env, timeout=60
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, explain(result)
    assert "needs the deepspeed package" in result.stderr and "pip install" in result.stderr
