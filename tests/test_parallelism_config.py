"""ParallelismConfig and tensor-parallel plans without processes (issue 27): Accelerate's fields,
defaults, variables and mesh names; every bad size or plan is a ConfigError naming it."""

import pytest
import torch
from parallel_trainers import PLAN, make_model
from torch import nn

from notebook_launcher import LaunchConfig, ParallelismConfig
from notebook_launcher.config.parallelism import from_section, mesh_coordinates, to_env, to_section
from notebook_launcher.config.tp_plan import model_plan
from notebook_launcher.errors import ConfigError
from notebook_launcher.runtime.parallel.mesh import data_leaders, data_rank_and_size
from notebook_launcher.runtime.parallel.tensor_parallel import expand_plan
from notebook_launcher.utils import TorchTensorParallelConfig


def test_defaults_env_and_mesh_order_are_accelerates(monkeypatch):
    pc = ParallelismConfig()
    assert (pc.dp_replicate_size, pc.dp_shard_size, pc.tp_size, pc.cp_size, pc.cp_backend) == (
        1,
        1,
        1,
        1,
        "torch",
    )
    monkeypatch.setenv("PARALLELISM_CONFIG_TP_SIZE", "2")
    monkeypatch.setenv("PARALLELISM_CONFIG_DP_SHARD_SIZE", "2")
    monkeypatch.setenv("PARALLELISM_CONFIG_DP_REPLICATE_SIZE", "2")
    pc = ParallelismConfig()
    assert pc.mesh_layout() == (("dp_replicate", "dp_shard", "tp"), (2, 2, 2))
    assert pc.dp_dim_names == ["dp_replicate", "dp_shard"] and pc.fsdp_dim_names == [
        "dp_replicate",
        "dp_shard_cp",
    ]
    assert pc.total_size == 8 and pc.data_parallel_size == 4 and pc.non_data_parallel_size == 2
    assert isinstance(pc.tp_handler, TorchTensorParallelConfig)


def test_sizes_not_matching_the_world_name_each_size():
    with pytest.raises(ConfigError) as info:
        ParallelismConfig(dp_shard_size=2, tp_size=3).check_world_size(4)
    text = str(info.value)
    for part in ("dp_replicate_size=1", "dp_shard_size=2", "tp_size=3", "cp_size=1", "world size 4"):
        assert part in text
    with pytest.raises(ConfigError, match="whole number"):
        ParallelismConfig(tp_size=0)
    with pytest.raises(ConfigError, match="dp_shard_size >= 2"):
        ParallelismConfig(dp_replicate_size=2, tp_size=2)


def test_accelerator_refuses_a_mesh_before_any_collective():
    from notebook_launcher import Accelerator

    with pytest.raises(ConfigError, match="world size 1"):
        Accelerator(parallelism_config=ParallelismConfig(tp_size=2))


def test_context_parallel_on_cpu_says_why():
    from notebook_launcher.runtime.parallel.mesh import check_device

    with pytest.raises(ConfigError, match="CUDA"):
        check_device(ParallelismConfig(cp_size=2, dp_shard_size=1), "cpu")


def test_yaml_section_and_env_are_accelerates():
    pc = ParallelismConfig(dp_shard_size=2, tp_size=2)
    section = to_section(pc)
    assert section["parallelism_config_tp_size"] == 2 and section["parallelism_config_cp_backend"] == "torch"
    assert from_section(section).mesh_layout() == pc.mesh_layout()
    env = to_env(section)
    assert env["ACCELERATE_USE_PARALLELISM_CONFIG"] == "true" and env["PARALLELISM_CONFIG_TP_SIZE"] == "2"
    config = LaunchConfig.from_dict({"num_processes": 4, "parallelism_config": section})
    assert config.parallelism_config["parallelism_config_dp_shard_size"] == 2
    with pytest.raises(ConfigError, match="world size 2"):
        LaunchConfig.from_dict({"num_processes": 2, "parallelism_config": section})
    with pytest.raises(ConfigError, match="parallelism_config_tp_size"):
        LaunchConfig.from_dict({"parallelism_config": {"parallelism_config_tp_sise": 2}})


def test_data_ranks_and_the_grid():
    pc = ParallelismConfig(dp_shard_size=2, tp_size=2)
    assert [data_rank_and_size(pc, r, 4) for r in range(4)] == [(0, 2), (0, 2), (1, 2), (1, 2)]
    assert data_leaders(pc, 4) == [0, 2]
    assert mesh_coordinates(pc, 4)[3] == {
        "rank": 3,
        "pp": 0,
        "dp_replicate": 0,
        "dp_shard": 1,
        "cp": 0,
        "tp": 1,
    }


def test_plans_are_checked_against_the_model():
    model = make_model()
    assert len(expand_plan(model, PLAN, 2)) == 8
    with pytest.raises(ConfigError, match="'layers.*.attn.k_proj' matches no module"):
        expand_plan(model, {"layers.*.attn.k_proj": "colwise"}, 2)
    with pytest.raises(ConfigError) as info:
        expand_plan(model, PLAN, 3)
    assert "layers.0.attn.q_proj" in str(info.value) and "out_features=16" in str(info.value)
    assert "tp_size=3" in str(info.value)
    with pytest.raises(ConfigError, match="'diagonal'"):
        TorchTensorParallelConfig(plan={"layers.*.attn.q_proj": "diagonal"})
    with pytest.raises(ConfigError, match="pass one"):
        TorchTensorParallelConfig(plan=PLAN, parallelize_fn=lambda m, mesh: m)


def test_a_transformers_models_own_plan():
    transformers = pytest.importorskip("transformers")
    from llama_trainers import llama_config

    model = transformers.LlamaForCausalLM(llama_config())
    plan = model_plan(model)
    assert plan["model.layers.*.self_attn.q_proj"] == "colwise"
    assert len(expand_plan(model, plan, 2)) == 2 * 7 + 2
    with pytest.raises(ConfigError, match="num_key_value_heads=2"):
        expand_plan(model, plan, 4)
    assert model_plan(nn.Linear(2, 2)) is None


def test_top_level_and_utils_export_it():
    import notebook_launcher
    import notebook_launcher.utils as utils

    assert notebook_launcher.ParallelismConfig is utils.ParallelismConfig
    assert utils.TorchContextParallelConfig().cp_comm_strategy == "allgather"
    assert torch  # torch imported for the plan's modules


def test_estimate_memory_splits_the_planned_layers():
    from parallel_trainers import TinyNet

    from notebook_launcher import estimate_memory

    class Net(TinyNet):
        _tp_plan = PLAN

    table = estimate_memory(Net, 2, strategies=["DDP"], optimizer="sgd", tp_size=2)
    ddp, tp = table.rows
    block_whole = 2 * 16 + 16 + 16  # norm weight and bias, o_proj and down_proj biases
    block_split = (16 * 16 + 16 + 16 * 16 + 32 * 16 + 32 + 16 * 32) // 2
    other = 16 * 8 + 16 + 16 + 1  # embed, head
    assert tp.strategy == "TP=2" and tp.parameters == 4 * (other + 2 * (block_whole + block_split))
    assert ddp.parameters == 4 * sum(p.numel() for p in make_model().parameters())
    both = estimate_memory(Net, 4, strategies=["DDP"], optimizer="sgd", tp_size=2, dp_shard_size=2).rows[1]
    assert both.strategy == "TP=2 x FSDP=2" and both.processes == 4 and both.parameters < tp.parameters


def test_accelerates_own_parallelism_config_is_taken_by_its_fields():
    accelerate = pytest.importorskip("accelerate")
    from notebook_launcher.runtime.parallel.mesh import resolve_config

    ours = resolve_config(accelerate.ParallelismConfig(dp_shard_size=2, tp_size=2), None, lambda: 4)
    assert ours.mesh_layout() == (("dp_shard", "tp"), (2, 2)) and ours.tp_handler is not None
    assert resolve_config(None, None, lambda: 4) is None
    assert resolve_config(ParallelismConfig(), None, lambda: 4).dp_replicate_size == 4  # Accelerate: DDP
