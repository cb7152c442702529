"""ConfigPanel driven programmatically: widget values -> LaunchConfig, disabled choices, YAML."""

from __future__ import annotations

import pytest

from notebook_launcher.config import LaunchConfig, load_config
from notebook_launcher.errors import ConfigError
from notebook_launcher.system.hardware import GPUInfo, HardwareInfo
from notebook_launcher.widgets import ConfigPanel

CPU_ONLY = HardwareInfo(cpu_count=4)
TWO_A100 = HardwareInfo(
    cpu_count=32,
    gpus=(
        GPUInfo(0, "NVIDIA A100-SXM4-80GB", 80 * 1024**3, (8, 0)),
        GPUInfo(1, "NVIDIA A100-SXM4-80GB", 80 * 1024**3, (8, 0)),
    ),
)
TURING = HardwareInfo(cpu_count=8, gpus=(GPUInfo(0, "Tesla T4", 15 * 1024**3, (7, 5)),))


def panel_on(hardware: HardwareInfo, **kwargs) -> ConfigPanel:
    return ConfigPanel(config=kwargs.pop("config", {}), hardware=hardware, **kwargs)


def test_widgets_build_the_launch_config():
    panel = panel_on(CPU_ONLY)
    panel.strategy.widget.value = "FSDP"
    panel.precision.widget.value = "bf16"
    panel.processes.widget.value = 2
    panel.grad_accum.widget.value = 4
    panel.seed.widget.value = "42"
    panel.fsdp.sharding.widget.value = "SHARD_GRAD_OP"
    panel.fsdp.wrap.widget.value = "TRANSFORMER_BASED_WRAP"
    panel.fsdp.layers.widget.value = "Block, Attention"
    panel.fsdp.offload.widget.value = True
    panel.fsdp.checkpointing.widget.value = True

    expected = LaunchConfig(
        num_processes=2,
        distributed_type="FSDP",
        mixed_precision="bf16",
        gradient_accumulation_steps=4,
        seed=42,
        fsdp_config={
            "fsdp_sharding_strategy": "SHARD_GRAD_OP",
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_transformer_layer_cls_to_wrap": "Block, Attention",
            "fsdp_offload_params": True,
            "fsdp_activation_checkpointing": True,
        },
    )
    assert panel.errors == {}
    assert panel.config == expected
    assert panel.config.fsdp_config.layer_classes() == ["Block", "Attention"]
    assert "FSDP · bf16 · 2 process(es)" in panel.summary.value


def test_deepspeed_and_machines_sections_reach_the_config():
    panel = panel_on(TWO_A100)
    panel.strategy.widget.value = "DEEPSPEED"
    panel.deepspeed.stage.widget.value = 3
    panel.deepspeed.offload_param.widget.value = "cpu"
    panel.deepspeed.offload_optimizer.widget.value = "cpu"
    panel.deepspeed.clipping.widget.value = "1.0"
    panel.machines.machines.widget.value = 2
    panel.machines.rank.widget.value = 1
    panel.machines.ip.widget.value = "10.0.0.1"
    panel.machines.port.widget.value = "29500"
    panel.processes.widget.value = 4
    config = panel.config
    assert (config.distributed_type, config.num_processes, config.num_machines, config.machine_rank) == (
        "DEEPSPEED",
        4,
        2,
        1,
    )
    assert (config.main_process_ip, config.main_process_port) == ("10.0.0.1", 29500)
    ds = config.deepspeed_config
    assert (ds.zero_stage, ds.offload_param_device, ds.offload_optimizer_device, ds.gradient_clipping) == (
        3,
        "cpu",
        "cpu",
        1.0,
    )


def test_ddp_follows_the_hardware_and_use_cpu():
    cpu = panel_on(CPU_ONLY)
    cpu.strategy.widget.value = "DDP"
    assert cpu.config.distributed_type == "MULTI_CPU"
    assert cpu.use_cpu.widget.disabled  # nothing to choose without a GPU

    gpu = panel_on(TWO_A100)
    gpu.strategy.widget.value = "DDP"
    gpu.processes.widget.value = 2
    assert gpu.config.distributed_type == "MULTI_GPU"
    gpu.use_cpu.widget.value = True
    assert gpu.config.distributed_type == "MULTI_CPU" and gpu.config.use_cpu is True


def test_unsupported_precisions_are_disabled_with_the_reason():
    panel = panel_on(CPU_ONLY)
    buttons = panel.precision.widget.buttons
    assert [m for m, b in buttons.items() if b.disabled] == ["fp8"]
    assert "compute capability 8.9" in buttons["fp8"].tooltip
    assert "fp8" in panel.precision.widget.reasons.value and "8.9" in panel.precision.widget.reasons.value
    assert "no CUDA GPU found" in panel.children[0].value and "4 CPU core(s)" in panel.children[0].value

    turing = panel_on(TURING)
    disabled = {m: b.tooltip for m, b in turing.precision.widget.buttons.items() if b.disabled}
    assert set(disabled) == {"bf16", "fp8"} and "8.0" in disabled["bf16"]
    assert "Tesla T4, 15.0 GiB, compute capability 7.5" in turing.children[0].value

    a100 = panel_on(TWO_A100)
    assert [m for m, b in a100.precision.widget.buttons.items() if b.disabled] == ["fp8"]


def test_clicking_a_disabled_choice_is_impossible_and_setting_it_is_reported():
    panel = panel_on(CPU_ONLY)
    panel.precision.widget.buttons["bf16"].value = True  # what a click does
    assert panel.precision.widget.value == "bf16"
    assert panel.precision.widget.buttons["fp8"].disabled
    panel.precision.widget.value = "fp8"  # code (or a loaded config) can still ask for it
    assert "not available here" in panel.errors["mixed_precision"]
    assert "✖" in panel.precision.message.value
    with pytest.raises(ConfigError, match="fp8"):
        _ = panel.config


def test_sections_show_only_for_their_strategy():
    panel = panel_on(CPU_ONLY)
    shown = lambda: (panel.fsdp.box.layout.display != "none", panel.deepspeed.box.layout.display != "none")  # noqa: E731
    assert shown() == (False, False)
    panel.strategy.widget.value = "FSDP"
    assert shown() == (True, False)
    panel.strategy.widget.value = "DEEPSPEED"
    assert shown() == (False, True)
    panel.strategy.widget.value = None
    assert shown() == (False, False)


def test_fsdp_section_offers_the_models_own_layer_classes():
    torch = pytest.importorskip("torch")
    layer = torch.nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16)
    model = torch.nn.Sequential(
        torch.nn.TransformerEncoder(layer, num_layers=3, enable_nested_tensor=False), torch.nn.Linear(8, 2)
    )
    panel = panel_on(CPU_ONLY, model=model)
    options = dict(panel.fsdp.layers.widget.options)
    assert "TransformerEncoderLayer ×3" in options
    assert list(options.values())[0] == "TransformerEncoderLayer"  # the repeated block comes first
    panel.strategy.widget.value = "FSDP"
    panel.fsdp.wrap.widget.value = "TRANSFORMER_BASED_WRAP"
    assert "fsdp_config.fsdp_transformer_layer_cls_to_wrap" in panel.errors  # no class chosen yet
    panel.fsdp.layers.widget.value = ("TransformerEncoderLayer",)
    assert panel.errors == {}
    assert panel.config.fsdp_config.layer_classes() == ["TransformerEncoderLayer"]


def test_yaml_round_trip_through_save_button_and_from_yaml(tmp_path):
    path = tmp_path / "cfg" / "launch.yaml"
    panel = panel_on(CPU_ONLY, save_path=path)
    panel.strategy.widget.value = "DDP"
    panel.precision.widget.value = "fp16"
    panel.processes.widget.value = 2
    panel.seed.widget.value = "7"
    panel.save_button.click()
    assert "Saved to" in panel.message.value
    assert load_config(path) == panel.config
    assert "distributed_type: MULTI_CPU" in path.read_text()

    again = ConfigPanel.from_yaml(path, hardware=CPU_ONLY)
    assert again.config == panel.config
    assert (again.strategy.widget.value, again.precision.widget.value, again.seed.widget.value) == (
        "DDP",
        "fp16",
        "7",
    )
    assert again.save_path.value == str(path)


def test_panel_shows_a_given_config():
    config = LaunchConfig(
        num_processes=2,
        distributed_type="FSDP",
        mixed_precision="bf16",
        gradient_accumulation_steps=2,
        fsdp_config={"fsdp_auto_wrap_policy": "SIZE_BASED_WRAP", "fsdp_min_num_params": 1000},
    )
    panel = panel_on(CPU_ONLY, config=config)
    assert panel.fsdp.min_params.widget.value == 1000
    assert panel.fsdp.min_params.box.layout.display != "none"
    assert panel.config == config


@pytest.mark.parametrize(
    ("change", "key", "text"),
    [
        ({"strategy": "NO", "processes": 2}, "num_processes", "strategy 'single' runs one process"),
        ({"strategy": "DDP", "processes": 6}, "num_processes", "4 CPU core(s)"),
        ({"seed": "abc"}, "seed", "seed='abc' is not a whole number"),
        ({"grad_accum": 0}, "gradient_accumulation_steps", "must be at least 1"),
        ({"machines": 2, "processes": 2, "strategy": "DDP"}, "main_process_ip", "address of machine 0"),
        ({"machines": 2, "processes": 3, "strategy": "DDP", "ip": "10.0.0.1"}, "num_processes", "divisible"),
        ({"port": "http"}, "main_process_port", "not a whole number"),
        (
            {"strategy": "DEEPSPEED", "offload_param": "cpu"},
            "deepspeed_config.offload_param_device",
            "zero_stage=3",
        ),
    ],
)
def test_invalid_combinations_are_shown_next_to_the_field(tmp_path, change, key, text):
    path = tmp_path / "never.yaml"
    panel = panel_on(CPU_ONLY, save_path=path)
    targets = {
        "strategy": panel.strategy,
        "processes": panel.processes,
        "seed": panel.seed,
        "grad_accum": panel.grad_accum,
        "machines": panel.machines.machines,
        "ip": panel.machines.ip,
        "port": panel.machines.port,
        "offload_param": panel.deepspeed.offload_param,
    }
    for name, value in change.items():
        targets[name].widget.value = value
    assert text in panel.errors[key]
    assert text.replace("'", "&#x27;") in panel.fields[key].message.value
    assert "✖" in panel.summary.value
    with pytest.raises(ConfigError, match="invalid settings"):
        _ = panel.config
    panel.save_button.click()
    assert not path.exists() and "invalid settings" in panel.message.value


def test_loaded_values_the_machine_cannot_run_are_flagged_not_changed_silently():
    panel = panel_on(CPU_ONLY, config=LaunchConfig(num_processes=2, distributed_type="MULTI_GPU"))
    assert "no GPU here" in panel.warnings["distributed_type"]
    assert "⚠" in panel.strategy.message.value
    assert panel.config.distributed_type == "MULTI_CPU"


def test_launch_button_only_with_fn():
    assert panel_on(CPU_ONLY).launch_button.layout.display == "none"
    with_fn = panel_on(CPU_ONLY, fn=print)
    assert with_fn.launch_button.layout.display != "none" and not with_fn.launch_button.disabled
    with_fn.seed.widget.value = "x"
    assert with_fn.launch_button.disabled


def test_restarts_and_the_hang_report_reach_the_config_and_come_back(tmp_path):
    panel = panel_on(CPU_ONLY)
    assert panel.config.stall_timeout == 300.0  # the launcher's default, shown as such
    panel.restarts.widget.value = 2
    panel.stall.widget.value = 30
    assert (panel.config.max_restarts, panel.config.stall_timeout) == (2, 30.0)
    panel.stall.widget.value = 0  # 0 turns the hang report off
    assert panel.config.stall_timeout is None
    # a saved config comes back into the fields
    panel.config = LaunchConfig(num_processes=2, max_restarts=1, stall_timeout=12.5)
    assert (panel.restarts.widget.value, panel.stall.widget.value) == (1, 12.5)
