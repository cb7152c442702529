"""`notebook-launcher launch`: real launches through torchrun, 2 CPU processes on gloo."""

from __future__ import annotations

import importlib.util
import json
import socket
import time

import pytest
from live_processes import pid_is_live
from test_cli_helpers import cli_env, explain, run_cli

from notebook_launcher.config import load_config
from notebook_launcher.system.hardware import cpu_count

SEED_EXAMPLE = """
import torch, torch.nn as nn, torch.optim as optim
from torch.utils.data import Dataset, DataLoader
from notebook_launcher import Accelerator
class DiyModel(nn.Module):
    def __init__(self):
        super().__init__(); self.fc = nn.Linear(10, 2)
    def forward(self, x): return self.fc(x)
class DiyDataset(Dataset):
    def __len__(self): return 1000
    def __getitem__(self, idx): return torch.randn(10), torch.randint(0, 2, (1,)).item()
accelerator = Accelerator()          # Accelerator(mixed_precision="fp16") also works
model = DiyModel(); criterion = nn.CrossEntropyLoss()
optimizer = optim.Adam(model.parameters(), lr=1e-3)
dataloader = DataLoader(DiyDataset(), batch_size=32, shuffle=True)
model, optimizer, dataloader, criterion = accelerator.prepare(model, optimizer, dataloader, criterion)
model.train()
for epoch in range(3):
    total_loss = 0.0
    for x, y in dataloader:
        optimizer.zero_grad(); loss = criterion(model(x), y)
        accelerator.backward(loss); optimizer.step(); total_loss += loss.item()
    print(f"Epoch {epoch+1}, Loss: {total_loss / len(dataloader):.4f}")
print(f"rank={accelerator.process_index} world={accelerator.num_processes} "
      f"precision={accelerator.mixed_precision} steps={len(dataloader)}")
"""

# Writes what reached the worker: the torch variables, our config variable, argv, threads.
ENV_PROBE = """
import json, os, sys
keys = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
        "OMP_NUM_THREADS", "TORCH_DISTRIBUTED_DEBUG", "NOTEBOOK_LAUNCHER_LAUNCH_CONFIG"]
report = {k: os.environ.get(k) for k in keys}
report["argv"] = sys.argv
report["name"] = __name__
report["file"] = __file__
print(f"probe says hello from rank {os.environ['RANK']}")
out = os.environ.get("PROBE_OUT", ".")
with open(os.path.join(out, f"rank{os.environ['RANK']}.json"), "w") as fp:
    json.dump(report, fp)
"""


def _reports(directory) -> dict[int, dict]:
    return {int(p.stem[4:]): json.loads(p.read_text()) for p in directory.glob("rank*.json")}


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("notebook_launcher.runtime.accelerator.facade") is None,
    reason="Accelerator not there yet",
)
def test_seed_example_runs_on_two_processes_and_bf16_reaches_the_accelerator(tmp_path):
    (tmp_path / "train.py").write_text(SEED_EXAMPLE)
    result = run_cli(["launch", "--num_processes=2", "--mixed_precision", "bf16", "train.py"], cwd=tmp_path)
    assert result.returncode == 0, explain(result)
    for epoch in (1, 2, 3):
        assert result.stdout.count(f"Epoch {epoch}, Loss: ") == 2, explain(result)
    for rank in (0, 1):
        # 1000 samples / 2 ranks / batch 32 = 16 steps per rank: the data really was sharded.
        assert f"rank={rank} world=2 precision=bf16 steps=16" in result.stdout, explain(result)


def test_env_contract_precedence_debug_and_busy_port(tmp_path):
    (tmp_path / "probe.py").write_text(ENV_PROBE)
    config_file = tmp_path / "cfg.yaml"
    config_file.write_text(
        "compute_environment: LOCAL_MACHINE\nnum_processes: 2\nmixed_precision: fp16\n"
        "gradient_accumulation_steps: 4\nseed: 7\nrdzv_backend: static\n"
    )
    busy = socket.socket()
    busy.bind(("", 0))
    busy.listen()
    busy_port = busy.getsockname()[1]
    try:
        result = run_cli(
            [
                "launch",
                "--config-file",
                str(config_file),
                "--mixed_precision",
                "bf16",
                "--main_process_port",
                str(busy_port),
                "--debug",
                "probe.py",
                "--lr",
                "0.1",
                "--num_processes",
                "5",
            ],
            cwd=tmp_path,
            env=cli_env(tmp_path, PROBE_OUT=str(tmp_path)),
        )
    finally:
        busy.close()
    assert result.returncode == 0, explain(result)
    reports = _reports(tmp_path)
    assert sorted(reports) == [0, 1], explain(result)
    threads = str(max(1, cpu_count() // 2))
    for rank, report in reports.items():
        assert (
            report["WORLD_SIZE"] == "2"
            and report["LOCAL_WORLD_SIZE"] == "2"
            and report["LOCAL_RANK"] == str(rank)
        )
        assert report["GROUP_RANK"] == "0" and report["MASTER_ADDR"] == "127.0.0.1"
        assert report["MASTER_PORT"] != str(busy_port)
        assert report["OMP_NUM_THREADS"] == threads
        assert report["TORCH_DISTRIBUTED_DEBUG"] == "DETAIL"
        # The script's own arguments pass through untouched, even ones that look like our flags.
        assert report["argv"] == [str(tmp_path / "probe.py"), "--lr", "0.1", "--num_processes", "5"]
        assert report["name"] == "__main__"
        config = json.loads(report["NOTEBOOK_LAUNCHER_LAUNCH_CONFIG"])
        assert config["mixed_precision"] == "bf16"  # flag beats file
        assert config["gradient_accumulation_steps"] == 4 and config["seed"] == 7  # file beats default
        assert config["distributed_type"] == "MULTI_CPU" and config["num_processes"] == 2  # detected
        assert config["debug"] is True
        assert config["main_process_port"] == int(report["MASTER_PORT"])
    assert (
        f"port {busy_port} is in use on this machine; using a free port ({reports[0]['MASTER_PORT']}) instead"
        in result.stderr
    )
    assert "resolved config" in result.stderr and "mixed_precision: bf16" in result.stderr
    assert f"rendezvous: backend=static endpoint=127.0.0.1:{reports[0]['MASTER_PORT']}" in result.stderr
    assert "TORCH_DISTRIBUTED_DEBUG=DETAIL" in result.stderr


def test_module_mode_default_config_file_and_user_threads(tmp_path):
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "probe.py").write_text(ENV_PROBE)
    default_file = tmp_path / "xdg" / "notebook_launcher" / "default_config.yaml"
    default_file.parent.mkdir(parents=True)
    default_file.write_text("num_processes: 1\ngradient_accumulation_steps: 3\n")
    env = cli_env(tmp_path, PROBE_OUT=str(tmp_path), OMP_NUM_THREADS="3")
    logs = tmp_path / "logs"
    args = ["launch", "-q", "--tee", "3", "--log_dir", str(logs), "-m", "mypkg.probe", "--flag", "x"]
    result = run_cli(args, cwd=tmp_path, env=env)
    assert result.returncode == 0, explain(result)
    assert "probe says hello from rank 0" in result.stdout  # --tee: on the console ...
    assert any(
        "probe says hello from rank 0" in p.read_text() for p in logs.rglob("stdout.log")
    )  # ... and in logs
    assert "notebook-launcher" not in result.stderr, explain(result)  # -q: nothing of ours
    report = _reports(tmp_path)[0]
    assert report["WORLD_SIZE"] == "1" and report["name"] == "__main__"
    assert report["argv"][1:] == ["--flag", "x"] and report["file"] == str(package / "probe.py")
    assert report["OMP_NUM_THREADS"] == "3"  # the user's setting is kept
    assert json.loads(report["NOTEBOOK_LAUNCHER_LAUNCH_CONFIG"])["gradient_accumulation_steps"] == 3


FAILING = """
import os, sys, time
rank = int(os.environ["RANK"])
open(os.path.join(sys.argv[1], f"pid{rank}"), "w").write(str(os.getpid()))
def explode():
    raise ValueError("boom on rank 1")
if rank == 1:
    while not os.path.exists(os.path.join(sys.argv[1], "pid0")):
        time.sleep(0.05)
    explode()
time.sleep(120)
"""


def test_failing_rank_is_named_with_its_traceback_and_no_worker_survives(tmp_path):
    (tmp_path / "fail.py").write_text(FAILING)
    result = run_cli(["launch", "--num_processes", "2", "fail.py", str(tmp_path)], cwd=tmp_path, timeout=60)
    assert result.returncode == 1, explain(result)
    assert "notebook-launcher: rank 1 failed: it exited with code 1" in result.stderr, explain(result)
    summary = result.stderr[result.stderr.index("notebook-launcher: rank 1 failed") :]
    assert "Traceback of rank 1:" in summary
    assert f'File "{tmp_path / "fail.py"}", line 6, in explode' in summary
    assert "ValueError: boom on rank 1" in summary
    assert "runpy" not in summary and "cli/bootstrap.py" not in summary  # only the user's frames
    assert "rank 0 was stopped by the launcher after rank 1 failed." in summary
    pids = [int((tmp_path / f"pid{rank}").read_text()) for rank in (0, 1)]
    deadline = time.monotonic() + 5
    while any(pid_is_live(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(pid_is_live(pid) for pid in pids), "a worker outlived the launcher"


SEED_FSDP_YAML = """\
compute_environment: LOCAL_MACHINE
distributed_type: FSDP
fsdp_config:
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_transformer_layer_cls_to_wrap: "GPT2Layer"
  fsdp_sharding_strategy: FULL_SHARD
mixed_precision: fp16
num_processes: 4
"""


def test_seed_fsdp_yaml_is_parsed_and_validated(tmp_path):
    path = tmp_path / "accelerate_config.yaml"
    path.write_text(SEED_FSDP_YAML)
    config = load_config(path)
    assert (
        config.distributed_type == "FSDP" and config.mixed_precision == "fp16" and config.num_processes == 4
    )
    assert config.fsdp_config.fsdp_auto_wrap_policy == "TRANSFORMER_BASED_WRAP"
    assert config.fsdp_config.layer_classes() == ["GPT2Layer"]
    assert config.fsdp_config.fsdp_sharding_strategy == "FULL_SHARD"
    result = run_cli(["config", "show", "--config_file", str(path)], cwd=tmp_path)
    assert result.returncode == 0, explain(result)
    assert (
        "distributed_type: FSDP" in result.stdout
        and "fsdp_transformer_layer_cls_to_wrap: GPT2Layer" in result.stdout
    )


FSDP_TRAIN = """
import sys, torch
from torch import nn
from notebook_launcher import Accelerator
accelerator = Accelerator()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.TransformerEncoderLayer(32, 4, 64, batch_first=True),
                      nn.TransformerEncoderLayer(32, 4, 64, batch_first=True), nn.Linear(32, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
model, optimizer = accelerator.prepare(model, optimizer)
from torch.distributed.fsdp import FSDPModule
layers = [m for m in model.modules() if isinstance(m, nn.TransformerEncoderLayer)]
assert layers and all(isinstance(m, FSDPModule) for m in layers), "layers were not sharded"
for _ in range(3):
    x = torch.randn(4, 8, 16, device=accelerator.device)
    loss = model(x).float().pow(2).mean()
    accelerator.backward(loss); optimizer.step(); optimizer.zero_grad()
print(f"fsdp-ok rank={accelerator.process_index} type={accelerator.distributed_type}")
"""


@pytest.mark.slow
def test_seed_fsdp_yaml_trains_on_two_cpu_processes(tmp_path):
    (tmp_path / "train.py").write_text(FSDP_TRAIN)
    path = tmp_path / "accelerate_config.yaml"
    path.write_text(SEED_FSDP_YAML.replace("GPT2Layer", "TransformerEncoderLayer"))
    result = run_cli(["launch", "--config_file", str(path), "--num_processes", "2", "train.py"], cwd=tmp_path)
    assert result.returncode == 0, explain(result)
    assert "fsdp-ok rank=0" in result.stdout and "fsdp-ok rank=1" in result.stdout, explain(result)


@pytest.mark.slow
def test_seed_fsdp_yaml_with_a_missing_layer_class_names_the_models_classes(tmp_path):
    (tmp_path / "train.py").write_text(FSDP_TRAIN)
    path = tmp_path / "accelerate_config.yaml"
    path.write_text(SEED_FSDP_YAML)  # GPT2Layer is not in the model
    result = run_cli(["launch", "--config_file", str(path), "--num_processes", "2", "train.py"], cwd=tmp_path)
    assert result.returncode != 0, explain(result)
    assert "GPT2Layer" in result.stderr and "TransformerEncoderLayer" in result.stderr, explain(result)


def test_launch_help_lists_every_flag_in_both_spellings(tmp_path):
    from notebook_launcher.cli.flags import FLAGS

    result = run_cli(["launch", "--help"], cwd=tmp_path)
    assert result.returncode == 0, explain(result)
    for flag in FLAGS:
        assert f"--{flag.name}" in result.stdout and f"--{flag.name.replace('_', '-')}" in result.stdout


EXIT_PROBE = """
import atexit, os
import torch, torch.distributed as dist

def probe():  # registered first, so it runs last: after the runtime's own exit handlers
    with open(f"group_at_exit{os.environ['RANK']}", "w") as fp:
        fp.write(str(dist.is_initialized()))

atexit.register(probe)
from notebook_launcher import Accelerator
acc = Accelerator()
acc.print("sum", acc.reduce(torch.ones(1), reduction="sum").item())
"""


def test_a_script_that_never_ends_training_leaves_no_group_to_cpp_teardown(tmp_path):
    """torch 2.13 aborts (SIGABRT, "terminate called without an active exception") about one exit
    in six when a gloo group reaches C++ static destruction; a successful script must exit 0, so the
    runtime destroys the group it made while Python still runs. Seen by an atexit probe that runs
    after the runtime's handler; the wheel test (test_packaging.py) runs the aborting case itself."""
    (tmp_path / "probe.py").write_text(EXIT_PROBE)
    result = run_cli(["launch", "--num_processes", "2", "probe.py"], cwd=tmp_path)
    assert result.returncode == 0, explain(result)
    assert "sum 2.0" in result.stdout, explain(result)
    for rank in (0, 1):
        assert (tmp_path / f"group_at_exit{rank}").read_text() == "False", explain(result)


ENDING = """
import atexit, sys, threading, time
from concurrent.futures import ThreadPoolExecutor

pool = ThreadPoolExecutor(2)
pool.submit(time.sleep, 0.1)

def late():
    time.sleep(0.5)
    print("thread done", flush=True)

threading.Thread(target=late).start()
atexit.register(lambda: print("atexit ran", flush=True))
print("unterminated", end="")
if len(sys.argv) > 1:
    sys.exit(int(sys.argv[1]))
"""


def test_a_finished_script_ends_as_python_would_without_cpp_teardown(tmp_path):
    """cli/bootstrap.py ends a finished worker with os._exit (torch's static destructors abort now
    and then): before that, what Python's exit does first still happens — threads joined, thread
    pools ended, atexit handlers run, unflushed output written — and sys.exit keeps its code."""
    (tmp_path / "ending.py").write_text(ENDING)
    result = run_cli(["launch", "--num_processes", "2", "ending.py"], cwd=tmp_path)
    assert result.returncode == 0, explain(result)
    for what in ("thread done", "atexit ran", "unterminated"):
        assert result.stdout.count(what) == 2, explain(result)
    result = run_cli(["launch", "--num_processes", "1", "ending.py", "3"], cwd=tmp_path)
    assert result.returncode != 0 and "exited with code 3" in result.stdout + result.stderr, explain(result)
