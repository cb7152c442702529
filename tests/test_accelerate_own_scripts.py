"""HuggingFace Accelerate 1.16's own distributed test scripts (accelerate/test_utils/scripts/test_ops.py,
test_sync.py, test_script.py), run unchanged from the installed package on 2 CPU processes under
torchrun with their `accelerate` imports answered by ours (tests/accelerate_scripts.py): every
sub-test their main() runs on MULTI_CPU holds, one pytest case each. The same harness on real
Accelerate is the control.

Not run on CPU: test_ops' test_copy_tensor_to_devices runs but returns at once (its main() asks for
MULTI_GPU or XLA); test_sync's gradient-accumulation matrix and test_script's mixed-precision
wrapper check are MULTI_GPU/CUDA-only (benchmarks/gpu_check.py runs them on 2 GPUs).
test_distributed_data_loop.py does not run on CPU on real Accelerate: its main() hangs in
test_can_join_uneven_inputs (Accelerate's join_uneven_inputs joins only multi-GPU-type worlds, so
the uneven DDP backward waits forever on MULTI_CPU) and its stateful-loader sub-tests need torchdata;
gpu_check.py runs it on 2 GPUs.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from accelerate_scripts import parse_report, torchrun_command
from test_cli_helpers import cli_env, explain, finish

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SCRIPTS = ("test_ops", "test_sync", "test_script")

# what each script's main() runs on MULTI_CPU with 2 processes (and without HF datasets installed)
SUBTESTS = [
    *(
        f"test_ops::test_{name}"
        for name in (
            "gather gather_object gather_non_contiguous broadcast pad_across_processes reduce_sum "
            "reduce_mean reduce_max op_checker copy_tensor_to_devices"
        ).split()
    ),
    "test_sync::test_dataloader_break",
    "test_sync::test_distributed_sync",
    "test_sync::test_distributed_sync_multiple_fwd",
    "test_sync::test_gradient_accumulation_with_opt_and_scheduler",
    *(
        f"test_script::{name}"
        for name in (
            "init_state_check process_execution_check test_split_between_processes_list "
            "test_split_between_processes_tuple test_split_between_processes_nested_dict "
            "test_split_between_processes_tensor test_split_between_processes_evenly rng_sync_check "
            "dl_preparation_check central_dl_preparation_check custom_sampler_check check_seedable_sampler "
            "check_seedable_sampler_with_data_seed check_seedable_sampler_in_batch_sampler_shard "
            "training_check(use_seedable_sampler=False) training_check(use_seedable_sampler=True) "
            "test_trigger test_reinstantiated_state"
        ).split()
    ),
]


def run_scripts(library: str, tmp_path: Path) -> tuple[dict[str, dict[int, tuple[str, str]]], str]:
    """{sub-test: {rank: (PASS|FAIL, message)}} from one torchrun launch of all three scripts."""
    env = cli_env(
        tmp_path,
        PYTHONPATH=str(ROOT),
        ACCELERATE_USE_CPU="true",  # as `accelerate launch --cpu`: real Accelerate's MULTI_CPU world
        OMP_NUM_THREADS="1",
        HF_HOME=str(tmp_path / "hf_home"),
    )
    proc = subprocess.Popen(
        torchrun_command(library, list(SCRIPTS)),
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    result = finish(proc, timeout=240)
    found = parse_report(result.stdout)
    assert result.returncode == 0 or found, explain(result)
    return found, explain(result)


@pytest.fixture(scope="module")
def ours(tmp_path_factory):
    return run_scripts("ours", tmp_path_factory.mktemp("ours"))


@pytest.mark.parametrize("name", SUBTESTS)
def test_accelerate_subtest_holds_on_ours(ours, name):
    found, output = ours
    assert name in found, f"{name} did not run\n{output[-3000:]}"
    assert found[name] == {0: ("PASS", ""), 1: ("PASS", "")}, found[name]


def test_every_script_ran_to_its_end_and_nothing_else_ran(ours):
    found, output = ours
    for script in SCRIPTS:
        assert found.get(f"{script}:main") == {0: ("PASS", ""), 1: ("PASS", "")}, output[-3000:]
    assert sorted(n for n in found if "::" in n) == sorted(SUBTESTS)


@pytest.mark.slow
def test_control_real_accelerate_passes_the_same_subtests(tmp_path):
    found, output = run_scripts("accelerate", tmp_path)
    failing = {n: r for n, r in found.items() if r != {0: ("PASS", ""), 1: ("PASS", "")}}
    assert failing == {}, output[-3000:]
    assert sorted(n for n in found if "::" in n) == sorted(SUBTESTS)
