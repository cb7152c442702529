"""The mesh from the shell (issue 27): `notebook-launcher launch` with Accelerate 1.16's
--parallelism_config_* flags, or a YAML `parallelism_config:` section as Accelerate writes it."""

from __future__ import annotations

import pytest
import yaml
from test_cli_helpers import explain, run_cli

from notebook_launcher.cli.flags import launch_parser

TRAIN = """
import torch
from torch import nn
from notebook_launcher import Accelerator


class Net(nn.Module):
    _tp_plan = {"up": "colwise", "down": "rowwise"}  # a model may carry its own plan, as transformers' do

    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear(8, 16), nn.Linear(16, 1)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


accelerator = Accelerator()
torch.manual_seed(0)
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
for _ in range(3):
    accelerator.backward(model(x).pow(2).mean()); optimizer.step(); optimizer.zero_grad()
full = accelerator.get_state_dict(model)
mesh = accelerator.torch_device_mesh
print(f"trained rank={accelerator.process_index} mesh={mesh.mesh_dim_names} tp={accelerator.tensor_parallel_rank} "
      f"sum={sum(v.double().sum().item() for v in full.values()):.9f}" if accelerator.is_main_process else "")
"""


def _reference_sum() -> float:
    import torch
    from torch import nn

    torch.manual_seed(0)
    up, down = nn.Linear(8, 16), nn.Linear(16, 1)
    params = [*up.parameters(), *down.parameters()]
    opt = torch.optim.SGD(params, lr=0.1)
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
    for _ in range(3):
        down(torch.relu(up(x))).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    return sum(p.double().sum().item() for p in params)


def test_flags_are_accelerates():
    args = launch_parser().parse_args(
        ["--use_parallelism_config", "--parallelism_config_dp_shard_size", "2", "--parallelism_config_tp_size",
         "2", "--parallelism_config_cp_backend", "torch", "train.py"]
    )  # fmt: skip
    assert args.parallelism_config_tp_size == 2 and args.use_parallelism_config


@pytest.mark.slow
def test_tensor_parallel_from_the_shell(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    args = ["launch", "--cpu", "--num_processes", "2", "--parallelism_config_tp_size", "2", "train.py"]
    result = run_cli(args, cwd=tmp_path, timeout=180)
    assert result.returncode == 0, explain(result)
    line = next(s for s in result.stdout.splitlines() if "trained rank=0" in s)
    assert "mesh=('tp',)" in line and "tp=0" in line
    assert float(line.rsplit("sum=", 1)[1]) == pytest.approx(_reference_sum(), abs=1e-5)


def test_accelerates_yaml_section_loads(tmp_path):
    from notebook_launcher import load_config

    section = {
        "parallelism_config_dp_replicate_size": 1,
        "parallelism_config_dp_shard_size": 2,
        "parallelism_config_tp_size": 2,
        "parallelism_config_cp_size": 1,
        "parallelism_config_cp_comm_strategy": "allgather",
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"num_processes": 4, "parallelism_config": section}))
    config = load_config(tmp_path / "config.yaml")
    assert config.parallelism_config["parallelism_config_tp_size"] == 2


def test_sizes_not_matching_the_processes_are_refused_before_launch(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    result = run_cli(
        ["launch", "--cpu", "--num_processes", "2", "--parallelism_config_tp_size", "4", "train.py"],
        cwd=tmp_path,
    )
    assert result.returncode != 0
    assert "tp_size=4" in result.stderr + result.stdout and "world size 2" in result.stderr + result.stdout


def test_config_asks_for_the_mesh():
    import io
    from types import SimpleNamespace

    from notebook_launcher.cli.questionnaire import Asker, ask_config

    answers = "1\nyes\n4\nmesh\n1\n2\n1\n3\n1\n2\n1\n2\nno\n1\nno\n"  # pp_size 1: no pipeline
    out = io.StringIO()
    config = ask_config(Asker(io.StringIO(answers), out), SimpleNamespace(cuda_device_count=0))
    assert "the product must equal it" in out.getvalue()
    assert config.parallelism_config["parallelism_config_tp_size"] == 2
    assert config.parallelism_config["parallelism_config_dp_shard_size"] == 2
    assert config.distributed_type == "FSDP"
    assert "parallelism_config_pp_size" not in config.parallelism_config


def test_config_asks_for_the_pipeline():
    """pp_size > 1 asks the schedule, micro-batches, stages per rank and split points; settings the
    pipeline cannot run (3 micro-batches over 2 ranks of an interleaved schedule) are explained and
    the mesh asked again; the answers make the YAML section the launch reads."""
    import io
    from types import SimpleNamespace

    from notebook_launcher.cli.questionnaire import Asker, ask_config
    from notebook_launcher.config.parallelism import from_section
    from notebook_launcher.utils import TorchPipelineParallelConfig

    mesh = ["2", "interleaved_1f1b", "3", "", "none", "1", "1", "2"]  # refused: 3 micro-batches
    mesh += ["2", "interleaved_1f1b", "4", "2", "layers.1, layers.2,layers.3", "1", "1", "2"]
    answers = ["1", "yes", "4", "mesh", *mesh, "no", "1", "no"]
    out = io.StringIO()
    config = ask_config(
        Asker(io.StringIO("\n".join(answers) + "\n"), out), SimpleNamespace(cuda_device_count=0)
    )
    assert "n_microbatches=3 must be a multiple of pp_size=2" in out.getvalue()
    assert "Please answer again" in out.getvalue()
    pc = from_section(config.parallelism_config)
    assert (pc.pp_size, pc.tp_size, pc.dp_shard_size) == (2, 1, 2)
    assert pc.pp_handler == TorchPipelineParallelConfig(
        "interleaved_1f1b", 4, 2, ["layers.1", "layers.2", "layers.3"]
    )
    assert config.distributed_type == "FSDP"
