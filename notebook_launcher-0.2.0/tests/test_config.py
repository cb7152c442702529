"""LaunchConfig: validation, files, the env contract (issue 2)."""

import json

import pytest

from notebook_launcher import ConfigError, LaunchConfig, load_config, save_config
from notebook_launcher.config import config_from_env, config_to_env, resolve_config


def test_defaults_and_round_trips(tmp_path):
    cfg = LaunchConfig(
        num_processes=4,
        num_machines=2,
        mixed_precision="BF16",
        distributed_type="fsdp",
        fsdp_config={"fsdp_transformer_layer_cls_to_wrap": ["Block", "Head"]},
    )
    assert cfg.mixed_precision == "bf16" and cfg.distributed_type == "FSDP"
    assert cfg.fsdp_config.layer_classes() == ["Block", "Head"]
    assert LaunchConfig.from_dict(cfg.to_dict()) == cfg
    assert config_from_env(config_to_env(cfg)) == cfg
    for name in ("c.yaml", "c.json"):
        path = save_config(cfg, tmp_path / name)
        assert load_config(path) == cfg
    assert config_from_env({}) is None


def test_accelerate_config_file_loads_unchanged(tmp_path):
    path = tmp_path / "accelerate.yaml"
    path.write_text(
        "compute_environment: LOCAL_MACHINE\ndebug: false\ndistributed_type: MULTI_CPU\ndowncast_bf16: 'no'\n"
        "enable_cpu_affinity: false\nmachine_rank: 0\nmain_training_function: main\nmixed_precision: 'no'\n"
        "num_machines: 1\nnum_processes: 2\nrdzv_backend: static\nsame_network: true\ntpu_env: []\n"
        "tpu_use_cluster: false\ntpu_use_sudo: false\nuse_cpu: true\n"
    )
    cfg = load_config(path)
    assert (cfg.num_processes, cfg.distributed_type, cfg.use_cpu) == (2, "MULTI_CPU", True)


@pytest.mark.parametrize(
    "data, message",
    [
        ({"num_proceses": 2}, "Unknown key 'num_proceses'.*Did you mean 'num_processes'"),
        ({"mixed_precision": "fp7"}, "mixed_precision='fp7'.*'no', 'fp16', 'bf16', 'fp8'"),
        ({"num_processes": 0}, "num_processes=0"),
        ({"num_processes": "two"}, "num_processes='two' has the wrong type"),
        ({"num_processes": 3, "num_machines": 2}, "divisible"),
        ({"machine_rank": 2, "num_machines": 2}, "machine_rank=2"),
        ({"main_process_port": 70000}, "main_process_port=70000"),
        ({"distributed_type": "TPU"}, "distributed_type='TPU'"),
        ({"gradient_accumulation_steps": 0}, "gradient_accumulation_steps=0"),
        ({"rdzv_backend": "etcd"}, "rdzv_backend='etcd'"),
        ({"use_cpu": "maybe"}, "use_cpu='maybe'"),
        ({"fsdp_config": {"fsdp_sharding_strategy": "QUARTER_SHARD"}}, "fsdp_sharding_strategy"),
        (
            {"fsdp_config": {"fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP"}},
            "fsdp_transformer_layer_cls_to_wrap",
        ),
        ({"fsdp_config": {"fsdp_sharding": "FULL_SHARD"}}, "Unknown key 'fsdp_sharding'"),
        ({"deepspeed_config": {"zero_stage": 4}}, "zero_stage=4"),
    ],
)
def test_bad_values_name_field_value_and_fix(data, message):
    with pytest.raises(ConfigError, match=message):
        LaunchConfig.from_dict(data)


def test_invalid_yaml_reports_the_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("num_processes: 2\nmixed_precision: [bf16\n")
    with pytest.raises(ConfigError, match="line 3"):
        load_config(path)
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"num_processes": 2,}')
    with pytest.raises(ConfigError, match="line 1"):
        load_config(bad_json)


def test_missing_file_and_bad_config_argument(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="config=42"):
        resolve_config(42)


def test_default_file_is_read_when_present(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("NOTEBOOK_LAUNCHER_CONFIG_FILE", raising=False)
    assert resolve_config(None) == LaunchConfig()
    save_config(LaunchConfig(mixed_precision="fp16"), tmp_path / "notebook_launcher" / "default_config.yaml")
    assert resolve_config(None).mixed_precision == "fp16"


def test_an_accelerate_key_we_cannot_honour_is_reported_in_one_plain_line(capsys):
    LaunchConfig.from_dict({"enable_cpu_affinity": True})
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "enable_cpu_affinity=True is not honoured" in lines[0]


def test_env_contract_is_json():
    env = config_to_env(LaunchConfig(seed=3))
    assert json.loads(next(iter(env.values())))["seed"] == 3


def test_unquoted_no_in_yaml_means_the_string_not_false(tmp_path):
    # PyYAML follows YAML 1.1, where an unquoted NO / no is the boolean false; a person writing
    # `distributed_type: NO` means Accelerate's value "NO" (Accelerate's own files quote it).
    path = tmp_path / "config.yaml"
    path.write_text("distributed_type: NO\nmixed_precision: no\nnum_processes: 1\n")
    config = load_config(path)
    assert (config.distributed_type, config.mixed_precision) == ("NO", "no")
    with pytest.raises(ConfigError, match="distributed_type='TRUE' is not valid"):
        LaunchConfig(distributed_type=True)  # `yes` stays an error naming the value
