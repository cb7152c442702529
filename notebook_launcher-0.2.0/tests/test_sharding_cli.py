"""FSDP and DeepSpeed from the shell: `notebook-launcher launch` with the flags and files users bring."""

from __future__ import annotations

import importlib.util
import json
import re

import pytest
from test_cli_helpers import explain, run_cli

TRAIN = """
import sys, torch
from torch import nn
from notebook_launcher import Accelerator
accelerator = Accelerator()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True),
                      nn.Linear(32, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
model, optimizer = accelerator.prepare(model, optimizer)
g = torch.Generator().manual_seed(accelerator.process_index)
for _ in range(3):
    x = torch.randn(4, 8, 16, generator=g)
    loss = model(x).float().pow(2).mean()
    accelerator.backward(loss); optimizer.step(); optimizer.zero_grad()
accelerator.save_state(sys.argv[1])
full = accelerator.get_state_dict(model)
print(f"trained rank={accelerator.process_index} type={accelerator.distributed_type} "
      f"params={sum(v.numel() for v in full.values())} loss={loss.item():.6f}")
accelerator.end_training()
"""


def _launch_train(tmp_path, flags: list[str], timeout: float):
    """`notebook-launcher launch <flags> --num_processes 2 train.py <tmp_path>/ckpt` in tmp_path."""
    argv = ["launch", *flags, "--num_processes", "2", "train.py", str(tmp_path / "ckpt")]
    return run_cli(argv, cwd=tmp_path, timeout=timeout)


@pytest.mark.slow
def test_fsdp_flags_with_sharded_checkpoints(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    fsdp_flags = ["--use_fsdp", "--fsdp_transformer_layer_cls_to_wrap", "TransformerEncoderLayer"]
    result = _launch_train(tmp_path, [*fsdp_flags, "--fsdp_state_dict_type", "SHARDED_STATE_DICT"], 180)
    assert result.returncode == 0, explain(result)
    assert "trained rank=0 type=FSDP" in result.stdout and "trained rank=1 type=FSDP" in result.stdout
    shards = sorted(p.name for p in (tmp_path / "ckpt" / "pytorch_model_fsdp_0").glob("*.distcp"))
    assert shards == ["__0_0.distcp", "__1_0.distcp"], explain(result)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="deepspeed is not installed")
def test_deepspeed_json_file_through_the_cli(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "ds_config.json").write_text(
        json.dumps(
            {
                "zero_optimization": {"stage": 3},
                "train_micro_batch_size_per_gpu": "auto",
                "gradient_accumulation_steps": "auto",
                "gradient_clipping": "auto",
                "bf16": {"enabled": "auto"},
            }
        )
    )
    result = _launch_train(tmp_path, ["--deepspeed", "ds_config.json"], 300)
    assert result.returncode == 0, explain(result)
    # The two ranks share one stdout, so their lines may interleave: find the reports, not lines.
    reports = re.findall(r"trained rank=(\d) type=(\w+) params=(\d+)", result.stdout)
    assert sorted(reports) == [("0", "DEEPSPEED", "9121"), ("1", "DEEPSPEED", "9121")], explain(result)
    assert (tmp_path / "ckpt" / "deepspeed").is_dir()
