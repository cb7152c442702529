"""HuggingFace Accelerate 1.16's own distributed test scripts (accelerate/test_utils/scripts/test_ops.py,
test_sync.py, test_script.py, test_distributed_data_loop.py), run unchanged from the installed package
on 2 CPU processes under torchrun with their `accelerate` imports answered by ours
(tests/accelerate_scripts.py): every sub-test their main() runs on MULTI_CPU holds, one pytest case
each (32 of 32 in the first three, 9 of 9 runnable ones in the data loop). The same harness on real
Accelerate is the control.

What does not run on CPU, and why: test_ops' test_copy_tensor_to_devices runs but returns at once (it
asks for MULTI_GPU or XLA); test_sync's gradient-accumulation matrix and test_script's fp16-wrapper
check are MULTI_GPU/CUDA-only. In test_distributed_data_loop, SKIPPED_ON_CPU are not called (the
harness reports them SKIP): on real Accelerate test_can_join_uneven_inputs hangs on MULTI_CPU (its
join_uneven_inputs joins only multi-GPU-type worlds, so the uneven DDP backward waits forever), the
three even_batches-override/warning tests fail there for the same reason (no override off multi-GPU),
and the two stateful-loader tests need torchdata. benchmarks/gpu_check.py runs all four scripts,
these included, on 2 GPUs over NCCL.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from accelerate_scripts import parse_report, start
from test_cli_helpers import cli_env, explain, finish

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SCRIPTS = ("test_ops", "test_sync", "test_script", "test_distributed_data_loop")
SKIPPED_ON_CPU = tuple(
    f"test_distributed_data_loop::{name}"
    for name in (
        "test_can_join_uneven_inputs test_join_can_override_even_batches "
        "test_join_can_override_for_mixed_type_dataloaders "
        "test_join_raises_warning_for_iterable_when_overriding_even_batches test_stateful_dataloader "
        "test_stateful_dataloader_save_state"
    ).split()
)

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
    *(
        f"test_distributed_data_loop::{name}"
        for name in (
            "test_skip_first_batches_preserves_metric_samples test_default_ensures_even_batch_sizes "
            "test_can_disable_even_batches test_join_raises_warning_for_non_ddp_distributed "
            "test_pickle_accelerator test_data_loader test_data_loader#2 test_data_loader#3 test_data_loader#4"
        ).split()
    ),
]


def run_scripts(library: str, tmp_path: Path) -> tuple[dict[str, dict[int, tuple[str, str]]], str]:
    """{sub-test: {rank: (PASS|FAIL|SKIP, message)}} from one torchrun launch of all four scripts."""
    env = cli_env(
        tmp_path,
        PYTHONPATH=str(ROOT),
        ACCELERATE_USE_CPU="true",  # as `accelerate launch --cpu`: real Accelerate's MULTI_CPU world
        OMP_NUM_THREADS="1",
        HF_HOME=str(tmp_path / "hf_home"),
    )
    proc = start(library, list(SCRIPTS), cwd=tmp_path, env=env, skip=SKIPPED_ON_CPU)
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
    ran = sorted(n for n in found if "::" in n and found[n][0][0] != "SKIP")
    assert ran == sorted(SUBTESTS)


@pytest.mark.slow
@pytest.mark.control
def test_control_real_accelerate_passes_the_same_subtests(tmp_path):
    found, output = run_scripts("accelerate", tmp_path)
    ran = {n: r for n, r in found.items() if r[0][0] != "SKIP"}
    failing = {n: r for n, r in ran.items() if r != {0: ("PASS", ""), 1: ("PASS", "")}}
    assert failing == {}, output[-3000:]
    assert sorted(n for n in ran if "::" in n) == sorted(SUBTESTS)
