"""Bad sharding input gets a clear error naming the value and the fix: refused in the notebook before
any process starts where the config alone shows it, otherwise raised by the worker and reported."""

import importlib.util
import json
import sys

import pytest
import torch
from sharding_trainers import train_transformer, transformer_model

from notebook_launcher import ConfigError, LaunchConfig, WorkerError, notebook_launch
from notebook_launcher.records.names import CONFIG_ENV
from notebook_launcher.runtime.world.state import reset_state

TIMEOUT = 120


def launch(fn, **options):
    return notebook_launch(fn, num_processes=2, timeout=TIMEOUT, **options)


def test_unknown_layer_class_lists_the_models_classes():
    with pytest.raises(WorkerError) as info:
        launch(
            train_transformer,
            kwargs=dict(batch_size=8, epochs=1),
            distributed_type="FSDP",
            fsdp_config={"fsdp_transformer_layer_cls_to_wrap": "GPT2Block"},
        )
    assert info.value.exc_type == "ConfigError"
    message = str(info.value)
    assert "'GPT2Block', which is not a module class in this model (TinyTransformer)" in message
    assert "TransformerEncoderLayer" in message and "MultiheadAttention" in message


def test_zero_stage_4_is_refused_before_any_process_starts():
    with pytest.raises(
        ConfigError, match="deepspeed_config.zero_stage=4 is not valid; allowed values: 0, 1, 2, 3"
    ):
        launch(train_transformer, distributed_type="DEEPSPEED", deepspeed_config={"zero_stage": 4})


def test_fsdp_with_a_deepspeed_file_is_refused(tmp_path):
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": 2}}))
    with pytest.raises(ConfigError, match="FSDP and DeepSpeed both shard the model and cannot be combined"):
        launch(
            train_transformer, distributed_type="FSDP", deepspeed_config={"deepspeed_config_file": str(path)}
        )


def hand_an_fsdp_model_to_deepspeed() -> None:
    from torch.distributed.fsdp import fully_shard

    from notebook_launcher import Accelerator

    acc = Accelerator()
    model = transformer_model()
    fully_shard(model)
    acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="deepspeed is not installed")
def test_an_fsdp_sharded_model_given_to_deepspeed_is_refused():
    with pytest.raises(WorkerError, match="already sharded with FSDP"):
        launch(
            hand_an_fsdp_model_to_deepspeed, distributed_type="DEEPSPEED", deepspeed_config={"zero_stage": 2}
        )


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "DeepSpeed config file '{path}' does not exist; pass the path of a JSON file"),
        (
            '{"zero_optimization": {"stage": 2},}',
            "is not valid JSON (Expecting property name enclosed in double quotes at line 1, column 36)",
        ),
        ("[1, 2]", "holds a JSON list; it must hold an object"),
        (
            '{"zero_optimization": {"stage": 4}}',
            "zero_optimization.stage in DeepSpeed config file '{path}'=4",
        ),
    ],
    ids=["missing", "not-json", "not-an-object", "stage-4"],
)
def test_unusable_deepspeed_json_files_are_refused_before_any_process_starts(tmp_path, content, message):
    path = tmp_path / "ds_config.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError) as info:
        launch(
            train_transformer,
            distributed_type="DEEPSPEED",
            deepspeed_config={"deepspeed_config_file": str(path)},
        )
    assert message.format(path=path) in str(info.value)


def make_an_accelerator() -> str:
    from notebook_launcher import Accelerator

    return Accelerator().device.type


def test_fp8_on_cpu_names_the_hardware_it_needs():
    with pytest.raises(WorkerError) as info:
        launch(make_an_accelerator, mixed_precision="fp8")
    assert info.value.exc_type == "HardwareError"
    assert "needs a CUDA GPU of compute capability 8.9+" in str(info.value) and "'bf16'" in str(info.value)


def test_activation_checkpointing_without_wrapped_layers_is_refused():
    with pytest.raises(WorkerError, match="fsdp_activation_checkpointing=True recomputes the wrapped layers"):
        launch(
            train_transformer,
            kwargs=dict(batch_size=8, epochs=1),
            distributed_type="FSDP",
            fsdp_config={"fsdp_activation_checkpointing": True},
        )


def step_then_prepare() -> None:
    from notebook_launcher import Accelerator

    acc = Accelerator()
    model = transformer_model()
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 4, 8)).sum().backward()
    opt.step()  # the optimizer now has state for the unsharded parameters
    acc.prepare(model, opt)


def test_an_optimizer_that_already_stepped_cannot_be_rebound_to_fsdp_shards():
    with pytest.raises(WorkerError, match="already has state"):
        launch(step_then_prepare, distributed_type="FSDP")


def test_deepspeed_clip_value_that_differs_from_the_config_is_refused():
    pytest.importorskip("deepspeed")
    with pytest.raises(WorkerError, match=r"deepspeed_config.gradient_clipping=0.5"):
        launch(
            train_transformer,
            kwargs=dict(batch_size=8, epochs=1, clip=0.5),
            distributed_type="DEEPSPEED",
            deepspeed_config={"zero_stage": 1},
        )


def test_deepspeed_missing_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "deepspeed", None)  # import deepspeed now raises ImportError
    monkeypatch.setenv(CONFIG_ENV, json.dumps(LaunchConfig(distributed_type="DEEPSPEED").to_dict()))
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    from notebook_launcher import Accelerator

    reset_state()
    try:
        with pytest.raises(
            ConfigError,
            match=r"needs the deepspeed package.*pip install deepspeed \(or pip install '\.\[deepspeed\]' from a notebook_launcher clone\)",
        ):
            Accelerator()
    finally:
        reset_state()
