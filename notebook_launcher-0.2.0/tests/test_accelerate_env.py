"""The env contract in both directions, with HuggingFace Accelerate itself: `accelerate launch` configures
our Accelerator; our launches configure HF's Accelerator. And Accelerate's config files load quietly."""

import warnings
from pathlib import Path

import pytest
from accelerate_helpers import (
    HF_SCRIPT,
    OURS_SCRIPT,
    accelerate_env,
    accelerate_launch,
    hf_accelerator_report,
    launcher_variables,
    reports,
    two_cpu_processes,
)
from test_cli_helpers import cli_env, explain, free_port, run_cli

from notebook_launcher import LaunchConfig, load_config, notebook_launch
from notebook_launcher.config import config_from_env

TESTS = str(Path(__file__).resolve().parent)


# ------------------------------------------------- direction 1: accelerate launch -> our Accelerator
@pytest.mark.parametrize(
    "argv, expected",
    [
        (
            ["--multi_gpu", "--num_processes", "2", "--mixed_precision", "fp16", "--dynamo_backend", "eager"],
            {"mixed_precision": "fp16", "dynamo_config.dynamo_backend": "EAGER", "distributed_type": None},
        ),
        (
            [
                "--use_fsdp",
                "--num_processes",
                "2",
                "--fsdp_version",
                "2",
                "--fsdp_reshard_after_forward",
                "false",
                "--fsdp_auto_wrap_policy",
                "TRANSFORMER_BASED_WRAP",
                "--fsdp_transformer_layer_cls_to_wrap",
                "Block",
                "--fsdp_offload_params",
                "true",
                "--mixed_precision",
                "bf16",
            ],
            {
                "distributed_type": "FSDP",
                "mixed_precision": "bf16",
                "fsdp_config.fsdp_version": 2,
                "fsdp_config.fsdp_reshard_after_forward": False,
                "fsdp_config.fsdp_offload_params": True,
                "fsdp_config.fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                "fsdp_config.fsdp_transformer_layer_cls_to_wrap": "Block",
            },
        ),
        (
            [
                "--use_deepspeed",
                "--num_processes",
                "2",
                "--zero_stage",
                "1",
                "--gradient_accumulation_steps",
                "4",
                "--gradient_clipping",
                "0.5",
            ],
            {
                "distributed_type": "DEEPSPEED",
                "gradient_accumulation_steps": 4,
                "deepspeed_config.zero_stage": 1,
                "deepspeed_config.gradient_clipping": 0.5,
                "deepspeed_config.gradient_accumulation_steps": 4,
            },
        ),
    ],
    ids=["multi_gpu+fp16+dynamo", "fsdp", "deepspeed"],
)
def test_accelerate_launch_variables_become_our_launch_config(argv, expected, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    variables = launcher_variables(argv, tmp_path)
    config = config_from_env(variables)
    for path, want in expected.items():
        value = config
        for part in path.split("."):
            value = getattr(value, part)
        assert value == want, (path, variables)


def test_accelerate_launchs_dynamo_flags_work_on_our_cli():
    from notebook_launcher.cli.flags import launch_parser
    from notebook_launcher.cli.resolve import flag_overrides

    args = launch_parser().parse_args(["--dynamo_backend", "eager", "--dynamo_use_fullgraph", "true", "s.py"])
    dynamo = LaunchConfig().replace(**flag_overrides(args)).dynamo_config
    assert (dynamo.dynamo_backend, dynamo.dynamo_use_fullgraph, dynamo.enabled) == ("EAGER", True, True)


def test_accelerate_use_cpu_means_use_cpu():
    assert config_from_env({"ACCELERATE_USE_CPU": "True", "ACCELERATE_MIXED_PRECISION": "no"}).use_cpu
    assert not config_from_env({"ACCELERATE_USE_CPU": "False", "ACCELERATE_MIXED_PRECISION": "no"}).use_cpu


@pytest.mark.slow
def test_our_accelerator_under_accelerate_launch(tmp_path):
    (tmp_path / "ours.py").write_text(OURS_SCRIPT)
    args = [*two_cpu_processes("bf16", "eager", free_port()), "ours.py", str(tmp_path / "out")]
    result = accelerate_launch(args, cwd=tmp_path, env=accelerate_env(tmp_path))
    assert result.returncode == 0, explain(result)
    for rank, report in enumerate(reports(tmp_path / "out")):
        assert report["index"] == rank and report["processes"] == 2
        assert report["distributed_type"] == "MULTI_CPU" and report["device"] == "cpu"
        assert report["precision"] == "bf16" and report["autocast_dtype"] == "torch.bfloat16"
        assert report["compiled"] is True
        assert report["sum_of_ranks"] == 3.0  # a real all-reduce over both processes


# ------------------------------------------------- direction 2: our launches -> HF's Accelerator
def test_hf_accelerator_inside_notebook_launch_sees_the_launch():
    result = notebook_launch(
        hf_accelerator_report,
        num_processes=2,
        mixed_precision="bf16",
        gradient_accumulation_steps=2,
        quiet=True,
        timeout=240,
    )
    for rank in (0, 1):
        assert result[rank]["processes"] == 2 and result[rank]["index"] == rank
        assert result[rank]["distributed_type"] == "MULTI_CPU"  # no cpu=True needed
        assert result[rank]["mixed_precision"] == "bf16" and result[rank]["accumulation"] == 2
        assert result[rank]["sum_of_ranks"] == 3.0


@pytest.mark.slow
def test_hf_fsdp_plugin_reads_the_fsdp_settings_we_export():
    result = notebook_launch(
        hf_accelerator_report,
        num_processes=2,
        distributed_type="FSDP",
        quiet=True,
        timeout=240,
        fsdp_config={"fsdp_reshard_after_forward": False, "fsdp_offload_params": True},
    )
    assert result[0]["fsdp"] == {"version": 2, "reshard_after_forward": False, "cpu_offload": True}


@pytest.mark.slow
def test_hf_accelerator_inside_the_cli_launch(tmp_path):
    (tmp_path / "hf.py").write_text(HF_SCRIPT.format(tests=TESTS))
    result = run_cli(
        [
            "launch",
            "--num_processes",
            "2",
            "--mixed_precision",
            "bf16",
            "--gradient_accumulation_steps",
            "3",
            "hf.py",
            str(tmp_path / "out"),
        ],
        cwd=tmp_path,
        env=cli_env(tmp_path, HF_HOME=str(tmp_path / "hf_home")),
        timeout=240,
    )
    assert result.returncode == 0, explain(result)
    for rank, report in enumerate(reports(tmp_path / "out")):
        assert (report["processes"], report["index"], report["distributed_type"]) == (2, rank, "MULTI_CPU")
        assert report["mixed_precision"] == "bf16" and report["accumulation"] == 3
        assert report["sum_of_ranks"] == 3.0


# ------------------------------------------------------------------ Accelerate's config files
def _load_quietly(path, capsys):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = load_config(path)
    return config, [str(w.message) for w in caught], capsys.readouterr().err


def test_the_file_accelerate_config_default_writes_loads_quietly(tmp_path, capsys):
    from accelerate.commands.config.default import write_basic_config

    path = tmp_path / "default_config.yaml"
    write_basic_config(mixed_precision="no", save_location=str(path))
    config, caught, err = _load_quietly(path, capsys)
    assert caught == [] and err == ""
    assert (config.num_processes, config.use_cpu, config.distributed_type) == (1, True, "NO")


def test_a_file_from_accelerates_questionnaire_loads_with_its_values(tmp_path, capsys):
    from accelerate.commands.config.config_args import ClusterConfig

    path = tmp_path / "fsdp.yaml"
    ClusterConfig(
        compute_environment="LOCAL_MACHINE",
        distributed_type="FSDP",
        mixed_precision="bf16",
        use_cpu=False,
        debug=False,
        num_processes=2,
        fsdp_config={
            "fsdp_version": 2,
            "fsdp_reshard_after_forward": False,
            "fsdp_state_dict_type": "SHARDED_STATE_DICT",
        },
        dynamo_config={"dynamo_backend": "EAGER", "dynamo_mode": "default", "dynamo_use_fullgraph": False},
    ).to_yaml_file(str(path))
    config, caught, err = _load_quietly(path, capsys)
    assert caught == [] and err == ""
    assert config.distributed_type == "FSDP" and config.fsdp_config.fsdp_reshard_after_forward is False
    assert config.dynamo_config.dynamo_backend == "EAGER"


def test_a_value_we_cannot_honour_gets_one_plain_line(capsys):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        LaunchConfig.from_dict({"enable_cpu_affinity": True, "downcast_bf16": True, "same_network": False})
    err = capsys.readouterr().err.splitlines()
    assert caught == []
    assert err == [
        "notebook_launcher: config: enable_cpu_affinity=True is not honoured: processes are not pinned to NUMA nodes."
    ]


def test_our_launches_export_accelerates_variables():
    from notebook_launcher.config import worker_env

    config = LaunchConfig(
        mixed_precision="bf16",
        gradient_accumulation_steps=2,
        distributed_type="DEEPSPEED",
        deepspeed_config={"zero_stage": 3},
    )
    env = worker_env(
        rank=0,
        local_rank=0,
        world_size=2,
        local_world_size=2,
        group_rank=0,
        master_addr="127.0.0.1",
        master_port=1,
        config=config,
        cpu_world=True,
    )
    assert (
        env["ACCELERATE_MIXED_PRECISION"] == "bf16" and env["ACCELERATE_GRADIENT_ACCUMULATION_STEPS"] == "2"
    )
    assert env["ACCELERATE_USE_CPU"] == "true" and env["ACCELERATE_USE_DEEPSPEED"] == "true"
    assert env["ACCELERATE_DEEPSPEED_ZERO_STAGE"] == "3"
    assert (
        config_from_env(
            {k: v for k, v in env.items() if k.startswith("ACCELERATE_")}
        ).deepspeed_config.zero_stage
        == 3
    )
