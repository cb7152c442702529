"""One-process tests of the decisions made before any engine exists: the DeepSpeed config dict
(what "auto" becomes, which conflicts are refused) and which Linear layers fp8 converts."""

import importlib.util
import json

import pytest
from torch import nn

from notebook_launcher import LaunchConfig
from notebook_launcher.errors import ConfigError
from notebook_launcher.runtime.precision import fp8
from notebook_launcher.runtime.strategies.deepspeed.config import build_engine_config


def engine_config(micro=8, world=2, client_optimizer=True, **launch):
    config = LaunchConfig(distributed_type="DEEPSPEED", **launch)
    return build_engine_config(
        config, micro_batch_size=micro, world_size=world, client_optimizer=client_optimizer
    )


def write(tmp_path, data, name="ds_config.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def test_fields_make_a_complete_config():
    built = engine_config(
        gradient_accumulation_steps=2,
        mixed_precision="bf16",
        deepspeed_config={"zero_stage": 3, "offload_optimizer_device": "cpu", "offload_param_device": "cpu"},
    )
    c = built.config
    assert c["zero_optimization"] == {
        "stage": 3,
        "offload_optimizer": {"device": "cpu"},
        "offload_param": {"device": "cpu"},
    }
    assert (c["train_micro_batch_size_per_gpu"], c["gradient_accumulation_steps"], c["train_batch_size"]) == (
        8,
        2,
        32,
    )
    assert c["bf16"] == {"enabled": True} and c["fp16"] == {"enabled": False}
    assert (
        c["gradient_clipping"] == 0.0
    )  # off unless asked: DeepSpeed's own default (1.0) would differ from DDP
    assert c["zero_allow_untested_optimizer"] is True
    assert built.zero_stage == 3 and built.gradient_accumulation_steps == 2


def test_auto_values_in_a_file_are_filled_and_written_values_kept(tmp_path):
    path = write(
        tmp_path,
        {
            "fp16": {"enabled": "auto"},
            "zero_optimization": {"stage": 1, "reduce_bucket_size": "auto"},
            "gradient_accumulation_steps": "auto",
            "gradient_clipping": "auto",
            "train_micro_batch_size_per_gpu": "auto",
            "steps_per_print": 50,
        },
    )
    built = engine_config(
        mixed_precision="fp16", deepspeed_config={"deepspeed_config_file": path, "gradient_clipping": 0.7}
    )
    c = built.config
    assert c["fp16"] == {"enabled": True} and c["gradient_clipping"] == 0.7 and c["steps_per_print"] == 50
    assert c["zero_optimization"]["reduce_bucket_size"] == 500_000_000
    assert c["train_batch_size"] == 16 and built.source == f"DeepSpeed config file {path!r}"


def test_a_files_accumulation_is_adopted_and_a_conflicting_one_refused(tmp_path):
    path = write(tmp_path, {"gradient_accumulation_steps": 4, "zero_optimization": {"stage": 2}})
    assert engine_config(deepspeed_config={"deepspeed_config_file": path}).gradient_accumulation_steps == 4
    with pytest.raises(
        ConfigError, match="gradient_accumulation_steps=2 in the launch config but 4 in DeepSpeed"
    ):
        engine_config(gradient_accumulation_steps=2, deepspeed_config={"deepspeed_config_file": path})


@pytest.mark.parametrize(
    "file, launch, message",
    [
        ({"bf16": {"enabled": True}}, {}, "enables bf16"),
        ({"optimizer": {"type": "AdamW"}}, {}, "has an 'optimizer' section and an optimizer was also passed"),
        ({"gradient_accumulation_steps": 0}, {}, "must be a positive integer or 'auto'"),
        ({"zero_optimization": {"stage": 2, "mystery": "auto"}}, {}, 'zero_optimization.mystery is "auto"'),
        ({"zero_optimization": {"stage": 4}}, {}, "zero_optimization.stage in DeepSpeed config file"),
    ],
    ids=["precision-mismatch", "two-optimizers", "bad-accumulation", "unfillable-auto", "zero-stage-4"],
)
def test_bad_files_are_refused_with_the_key_and_the_fix(tmp_path, file, launch, message):
    path = write(tmp_path, file)
    with pytest.raises(ConfigError, match=message):
        engine_config(deepspeed_config={"deepspeed_config_file": path}, **launch)


def test_parameter_offload_needs_zero3():
    with pytest.raises(ConfigError, match="offload_param_device='cpu' needs zero_stage=3"):
        engine_config(deepspeed_config={"zero_stage": 2, "offload_param_device": "cpu"})


# ------------------------------------------------------------------------------------- fp8
class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(64, 4, batch_first=True)
        self.up = nn.Linear(64, 256)
        self.down = nn.Linear(256, 64)
        self.odd = nn.Linear(64, 10)  # 10 outputs: not a multiple of 16


def fp8_model() -> nn.Module:
    return nn.Sequential(nn.Linear(32, 64), Block(), nn.Linear(64, 32))


def test_fp8_converts_the_aligned_linears_except_the_head_and_attention():
    assert fp8.fp8_linear_names(fp8_model()) == ["0", "1.up", "1.down"]


def test_fp8_finds_nothing_to_convert_in_a_tiny_model():
    with pytest.raises(ConfigError, match="found no Linear layer to convert"):
        fp8.convert_to_fp8(nn.Sequential(nn.Linear(10, 3)), backend="torchao")


@pytest.mark.skipif(importlib.util.find_spec("torchao") is None, reason="torchao is not installed")
def test_torchao_swaps_exactly_those_layers_on_cpu():
    from torchao.float8.float8_linear import Float8Linear

    model = fp8.convert_to_fp8(fp8_model(), backend="torchao")
    converted = sorted(name for name, m in model.named_modules() if isinstance(m, Float8Linear))
    assert converted == sorted(fp8.fp8_linear_names(fp8_model()))
    assert type(model[2]) is nn.Linear and type(model[1].attn.out_proj) is not Float8Linear


@pytest.mark.skipif(importlib.util.find_spec("torchao") is None, reason="torchao is not installed")
def test_torchao_conversion_keeps_the_parameter_objects():
    model = fp8_model()
    before = [id(p) for p in model.parameters()]
    fp8.convert_to_fp8(model, backend="torchao")
    assert [id(p) for p in model.parameters()] == before  # an optimizer made before prepare() stays valid


def test_fp8_without_a_backend_names_the_install_command(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(ConfigError, match="pip install torchao"):
        fp8.fp8_backend()
