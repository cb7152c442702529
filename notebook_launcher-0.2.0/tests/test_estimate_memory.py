"""`estimate_memory` and `notebook-launcher estimate-memory`, in one process: the arithmetic per
strategy on hand-counted models, where the model comes from, and the command line. (The estimate
against bytes real ranks hold: tests/test_sharding_memory.py.)"""

import subprocess
import sys

import pytest
from test_cli_helpers import CLI, cli_env
from torch import nn

from notebook_launcher import estimate_memory
from notebook_launcher.errors import ConfigError

BIG = 200_000  # elements of Wide's big weight: above ZeRO-3's persistence threshold (100000)


class Small(nn.Module):
    """25 parameters: a Linear(3, 5) (15 + 5) and a Linear(5, 1) without bias (5)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(3, 5)
        self.b = nn.Linear(5, 1, bias=False)


class Wide(nn.Module):
    """One big weight (1000 x 200) and a small bias (1000)."""

    def __init__(self) -> None:
        super().__init__()
        self.big = nn.Linear(200, 1000)


def row(model, strategy, **kwargs):
    return estimate_memory(model, strategies=[strategy], **kwargs).rows[0]


def test_ddp_holds_everything_on_every_rank():
    r = row(Small, "DDP", num_processes=4)
    assert (r.parameters, r.gradients, r.optimizer) == (100, 100, 200)  # fp32, AdamW's two moments


def test_fsdp_splits_dim_0_like_fully_shard_and_counts_the_fullest_rank():
    r = row(Small, "FSDP FULL_SHARD", num_processes=2)
    local = 3 * 3 + 3 + 1 * 5  # a.weight: ceil(5/2)=3 rows of 3; a.bias: 3; b.weight: 1 row (dim 0 is 1) of 5
    assert (r.parameters, r.gradients, r.optimizer) == (4 * local, 4 * local, 8 * local)
    assert row(Small, "FSDP SHARD_GRAD_OP", num_processes=2).total == r.total
    assert row(Small, "FSDP HYBRID_SHARD", num_processes=2, num_machines=2).total == row(Small, "DDP").total
    offloaded = row(Small, "FSDP FULL_SHARD", num_processes=2, offload=True)
    assert offloaded.total == 0 and offloaded.offloaded == r.total


def test_zero_stages_partition_more_and_keep_a_master_where_deepspeed_does():
    n, half_big = 2, BIG // 2
    z1 = row(Wide, "ZeRO-1", num_processes=n)
    assert z1.parameters == 4 * (BIG + 1000) and z1.gradients == 4 * (BIG + 1000)
    assert z1.optimizer == 4 * 3 * (half_big + 500)  # two moments + a separate fp32 partition
    z2 = row(Wide, "ZeRO-2", num_processes=n)
    assert z2.gradients == 4 * (half_big + 500) and z2.optimizer == z1.optimizer
    z3 = row(Wide, "ZeRO-3", num_processes=n)
    assert z3.parameters == 4 * (half_big + 500 + 1000)  # the small bias is kept whole too (persistent)
    assert z3.optimizer == 4 * 2 * (half_big + 500)  # fp32: the master *is* the partition
    bf16 = row(Wide, "ZeRO-3", num_processes=n, mixed_precision="bf16")
    assert bf16.parameters == 2 * (half_big + 500 + 1000) and bf16.optimizer == 4 * 3 * (half_big + 500)


def test_zero_offload_moves_what_deepspeed_moves():
    z2 = row(Wide, "ZeRO-2", num_processes=2, offload=True)
    assert z2.parameters == 4 * (BIG + 1000) and z2.gradients == 0 and z2.optimizer == 0
    assert z2.offloaded == row(Wide, "ZeRO-2", num_processes=2).optimizer + 4 * (BIG // 2 + 500)
    z3 = row(Wide, "ZeRO-3", num_processes=2, offload=True)
    assert z3.total == 0 and z3.offloaded > row(Wide, "ZeRO-3", num_processes=2).total  # + the master


def test_optimizers_frozen_and_tied_parameters():
    assert row(Small, "DDP", optimizer="sgd").optimizer == 0
    assert row(Small, "DDP", optimizer="sgd-momentum").optimizer == 100

    def frozen_and_tied():
        model = Small()
        model.a.requires_grad_(False)
        model.c = nn.Linear(3, 5)
        model.c.weight = model.a.weight  # tied (and frozen): counted once
        return model

    r = row(frozen_and_tied, "DDP")
    assert r.parameters == 4 * (25 + 5) and r.gradients == 4 * (5 + 5)  # b.weight and c.bias train


def test_the_table_covers_every_combination_and_prints():
    table = estimate_memory(Small, [2, 8], mixed_precision=["no", "bf16"], offload="both")
    assert len(table.rows) == 2 * 2 * (1 + 6 * 2)  # DDP has no offload row
    text = str(table)
    assert text.splitlines()[1].split()[:4] == ["strategy", "offload", "precision", "processes"]
    assert "ZeRO-3" in text and "CPU)" in text and "<table>" in table._repr_html_()
    assert table.find("ZeRO-2", processes=8, precision="bf16", offload=True).processes == 8


def test_a_factory_is_built_on_the_meta_device_without_memory():
    from notebook_launcher.system.host_memory import process_memory

    before = process_memory().rss
    r = row(lambda: nn.Sequential(*(nn.Linear(20_000, 20_000) for _ in range(40))), "DDP")  # 64 GB real
    assert r.parameters == 40 * 4 * (20_000 * 20_001) and process_memory().rss - before < 2**30


def test_models_from_files_and_modules(tmp_path):
    file = tmp_path / "my_model.py"
    file.write_text(
        "from torch import nn\n"
        "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.a = nn.Linear(3, 5)\n"
        "def build_model():\n    return nn.Linear(5, 1)\n"
        "if __name__ == '__main__':\n    raise SystemExit('training code must not run')\n"
    )
    assert estimate_memory(str(file)).num_parameters == 6  # build_model() is found by name
    assert estimate_memory(f"{file}:Net").num_parameters == 20
    assert estimate_memory("torch.nn:Identity").num_parameters == 0
    assert estimate_memory(Small()).num_parameters == 25  # a real module is used as it is


@pytest.mark.parametrize(
    "source, kwargs, says",
    [
        ("gpt2", {}, "Models are not downloaded"),
        ("nowhere.py", {}, "does not exist"),
        ("torch.nn:Linear", {}, "missing 2 required positional arguments"),
        (Small, {"strategies": ["ZeRO-4"]}, "is not one of"),
        (Small, {"mixed_precision": "fp4"}, "mixed_precision='fp4'"),
        (Small, {"optimizer": "lion"}, "optimizer='lion'"),
        (Small, {"num_processes": 3, "num_machines": 2}, "not a multiple of num_machines=2"),
    ],
)
def test_bad_input_names_the_problem(source, kwargs, says):
    with pytest.raises(ConfigError, match=says):
        estimate_memory(source, **kwargs)


# ------------------------------------------------------------------ the command line
def test_the_command_prints_the_table(tmp_path):
    (tmp_path / "net.py").write_text(
        "import torch.nn as nn\ndef build_model():\n    return nn.Linear(1000, 400)\n"
    )
    args = ["estimate-memory", "net.py", "--num_processes", "2", "4", "--strategies", "ddp", "zero3",
            "--mixed_precision", "no", "bf16", "--offload", "both"]  # fmt: skip
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=tmp_path, env=cli_env(tmp_path))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert (
        "0.4M parameters" in lines[0] and len([ln for ln in lines if ln.startswith(("DDP", "ZeRO-3"))]) == 12
    )


@pytest.mark.parametrize(
    "args, says",
    [
        (["gpt2"], "Models are not downloaded"),
        (["torch.nn:Identity", "--strategies", "zero4"], "unknown strategy 'zero4'"),
        (["torch.nn:Identity", "--offload", "maybe"], "--offload 'maybe'"),
        (["torch.nn:Identity", "--num_processes", "0"], "too small"),
    ],
)
def test_the_command_refuses_bad_input_in_one_line(tmp_path, args, says):
    done = subprocess.run(
        [*CLI, "estimate-memory", *args], capture_output=True, text=True, env=cli_env(tmp_path)
    )
    assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_the_command_and_the_estimate_never_import_the_runtime(tmp_path):
    code = (
        "import sys\nfrom notebook_launcher.cli import main\n"
        "assert main(['estimate-memory', 'torch.nn:Identity']) == 0\n"
        "bad = [m for m in sys.modules if m.startswith(('notebook_launcher.runtime', 'notebook_launcher.launch', "
        "'deepspeed'))]\nassert not bad, bad\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(tmp_path))
    assert done.returncode == 0, done.stderr
