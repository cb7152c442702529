"""In-process checks of the CLI's pieces: the flag table, the run plan, failure reports, Ctrl-C."""

from __future__ import annotations

import dataclasses
import json
import signal
import time
from types import SimpleNamespace

from live_processes import pid_is_live
from test_cli_helpers import cli_env, explain, finish, start_cli

from notebook_launcher.cli.flags import FLAGS, launch_parser
from notebook_launcher.cli.resolve import flag_overrides
from notebook_launcher.cli.torchrun import build_plan, describe_failures, root_cause
from notebook_launcher.config import LaunchConfig
from notebook_launcher.config.parallelism import SECTION_KEYS
from notebook_launcher.resolution import resolve_launch

CPU_ONLY = SimpleNamespace(cuda_device_count=0, fp8_supported=False, bf16_supported=True)


def test_every_flag_lands_on_a_real_config_field():
    fields = {f.name for f in dataclasses.fields(LaunchConfig)}
    sections = {
        "fsdp_config": {f.name for f in dataclasses.fields(LaunchConfig().fsdp_config)},
        "deepspeed_config": {f.name for f in dataclasses.fields(LaunchConfig().deepspeed_config)},
        "dynamo_config": {f.name for f in dataclasses.fields(LaunchConfig().dynamo_config)},
        "parallelism_config": set(SECTION_KEYS),  # Accelerate's YAML keys (a plain mapping)
    }
    for flag in FLAGS:
        if flag.key is None:
            continue
        section, _, name = flag.key.rpartition(".")
        assert name in (sections[section] if section else fields), flag.key


def test_flags_become_overrides_that_beat_the_file():
    args = launch_parser().parse_args(
        ["--use-fsdp", "--fsdp_offload_params", "--fsdp-sharding-strategy", "shard_grad_op", "--num_processes",
         "4", "--mixed-precision", "BF16", "s.py", "--num_processes", "7"]
    )  # fmt: skip
    overrides = flag_overrides(args)
    assert overrides == {
        "num_processes": 4,
        "mixed_precision": "bf16",
        "distributed_type": "FSDP",
        "fsdp_config": {"fsdp_offload_params": True, "fsdp_sharding_strategy": "SHARD_GRAD_OP"},
    }
    assert args.training_script_args == ["--num_processes", "7"]
    file_config = LaunchConfig(num_processes=2, mixed_precision="fp16", gradient_accumulation_steps=3)
    merged = file_config.replace(**overrides)
    assert (merged.num_processes, merged.mixed_precision, merged.gradient_accumulation_steps) == (
        4,
        "bf16",
        3,
    )


def test_plan_for_c10d_names_the_host_and_gives_each_worker_its_threads():
    config = LaunchConfig(num_processes=4, num_machines=2, machine_rank=1, main_process_ip="10.0.0.1",
                          main_process_port=29555, rdzv_backend="c10d", distributed_type="MULTI_CPU")  # fmt: skip
    plan = build_plan(
        resolve_launch(config, "script", threads=3, hardware=CPU_ONLY), ["script", "t.py", "--x"]
    )
    assert "--rdzv_endpoint=10.0.0.1:29555" in plan.torchrun_args
    assert "--rdzv_conf=is_host=false" in plan.torchrun_args and "--nproc_per_node=2" in plan.torchrun_args
    assert plan.torchrun_args[-5:] == [
        "--module",
        "notebook_launcher.cli.bootstrap",
        "script",
        "t.py",
        "--x",
    ]
    assert plan.env["OMP_NUM_THREADS"] == "3"
    assert json.loads(plan.env["NOTEBOOK_LAUNCHER_LAUNCH_CONFIG"])["machine_rank"] == 1


def test_rdzv_backend_and_restarts_from_the_file_reach_torchrun(tmp_path):
    from notebook_launcher.cli.resolve import resolve_launch_config

    path = tmp_path / "c.yaml"
    path.write_text(
        "num_processes: 4\nnum_machines: 2\nmain_process_ip: 10.1.2.3\nmain_process_port: 29511\n"
        "rdzv_backend: c10d\nmax_restarts: 2\n"
    )
    args = launch_parser().parse_args(["--config_file", str(path), "s.py"])
    request, source = resolve_launch_config(args, hardware=CPU_ONLY)
    assert source.path == path and request.config.distributed_type == "MULTI_CPU"
    plan = build_plan(request, ["script", "s.py"])
    assert "--rdzv_backend=c10d" in plan.torchrun_args and "--max_restarts=2" in plan.torchrun_args
    assert "--rdzv_conf=is_host=true" in plan.torchrun_args
    assert "--rdzv_endpoint=10.1.2.3:29511" in plan.torchrun_args


def test_one_machine_rendezvous_is_static_on_loopback_and_says_so():
    # c10d on one machine would make torchrun's agent open a second store on every interface.
    config = LaunchConfig(
        num_processes=2, main_process_ip="10.1.2.3", main_process_port=0, rdzv_backend="c10d"
    )
    plan = build_plan(resolve_launch(config, "script", hardware=CPU_ONLY), ["script", "s.py"])
    assert "--rdzv_backend=static" in plan.torchrun_args and "--master_addr=127.0.0.1" in plan.torchrun_args
    assert any("rdzv_backend=c10d is for several machines" in note for note in plan.notes)


def test_plan_on_one_machine_turns_port_0_into_a_free_port():
    config = LaunchConfig(num_processes=2, main_process_ip="127.0.0.1", main_process_port=0)
    plan = build_plan(resolve_launch(config, "script", hardware=CPU_ONLY), ["script", "t.py"])
    port = plan.config.main_process_port
    assert port and port > 0 and f"--master_port={port}" in plan.torchrun_args


def _failure(exitcode, *, time_ns=None, timestamp=100, message="x"):
    payload = message
    if time_ns is not None:
        payload = {
            "message": message,
            "extraInfo": {"py_callstack": f"Traceback...\n{message}", "time_ns": str(time_ns)},
        }
    return SimpleNamespace(exitcode=exitcode, message=payload, timestamp=timestamp, local_rank=0, pid=1,
                           signal_name=lambda: signal.Signals(-exitcode).name if exitcode < 0 else "<N/A>")  # fmt: skip


def test_the_first_failure_is_the_root_cause_even_within_one_second():
    failures = {
        0: _failure(1, time_ns=100_000_000_500, message="RuntimeError: Connection closed by peer"),
        1: _failure(1, time_ns=100_000_000_100, message="ValueError: boom"),
        2: _failure(-signal.SIGTERM, timestamp=99),
    }
    assert root_cause(failures) == 1
    report = describe_failures(failures)
    assert report.splitlines()[0].startswith("notebook-launcher: rank 1 failed: it exited with code 1")
    assert "ValueError: boom" in report
    assert "rank 0 also failed: it exited with code 1: RuntimeError: Connection closed by peer" in report
    assert "rank 2 was stopped by the launcher after rank 1 failed." in report


def test_ctrl_c_stops_every_worker_and_exits_130(tmp_path):
    (tmp_path / "sleepy.py").write_text(
        "import os, sys, time\n"
        "open(os.path.join(sys.argv[1], 'pid' + os.environ['RANK']), 'w').write(str(os.getpid()))\n"
        "time.sleep(120)\n"
    )
    proc = start_cli(
        ["launch", "--num_processes", "2", "sleepy.py", str(tmp_path)], cwd=tmp_path, env=cli_env(tmp_path)
    )
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("pid*"))) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)  # to the launcher only, as a supervisor would
    result = finish(proc, timeout=60)
    assert result.returncode == 130, explain(result)
    assert "stopped by SIGINT; workers were shut down" in result.stderr

    for pid_file in tmp_path.glob("pid*"):
        pid = int(pid_file.read_text())
        assert not pid_is_live(pid)
