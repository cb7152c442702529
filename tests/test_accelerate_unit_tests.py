"""HuggingFace Accelerate's own unit-test files judge us: seven of them (state checkpointing, scheduler,
optimizer, memory utils, kwargs handlers, grad sync, tracking) run unchanged on CPU, from the published
source distribution of the pinned version (tests/accelerate_sources.py: fetched into a per-user cache,
not copied here), with `accelerate` answered by ours (tests/accelerate_unit_plugin.py). Every test they
collect must pass, except those named below with the reason each cannot pass on a CPU machine. The same
run on real Accelerate is the control (`-m control`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from accelerate_sources import accelerate_sources, pinned_accelerate_version

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
FILES = (
    "test_state_checkpointing",
    "test_scheduler",
    "test_optimizer",
    "test_memory_utils",
    "test_kwargs_handlers",
    "test_grad_sync",
    "test_tracking",
)

# skipped by Accelerate's own decorators on this machine (their reasons), on Accelerate and on ours
SKIPPED_ON_CPU = {
    "test_state_checkpointing::CheckpointTest_use_safetensors::test_map_location": "needs a GPU",
    "test_state_checkpointing::CheckpointTest_use_pytorch::test_map_location": "needs a GPU",
    "test_scheduler::SchedulerTester::test_accumulation": "needs transformers and datasets (HF suite)",
    "test_optimizer::OptimizerTester::test_accelerated_optimizer_step_was_skipped": "needs a GPU (fp16)",
    "test_memory_utils::MemoryTest::test_release_memory": "needs a GPU",
    "test_kwargs_handlers::KwargsHandlerTester::test_autocast_kwargs": "needs a GPU",
    "test_kwargs_handlers::KwargsHandlerTester::test_ddp_comm_hook": "needs several GPUs",
    "test_kwargs_handlers::KwargsHandlerTester::test_ddp_kwargs": "needs several GPUs",
    "test_kwargs_handlers::KwargsHandlerTester::test_grad_scaler_kwargs": "needs a GPU",
    "test_kwargs_handlers::KwargsHandlerTester::test_profile_kwargs": "marked slow (RUN_SLOW=1)",
    "test_grad_sync::SyncScheduler::test_gradient_sync_gpu": "needs a GPU",
    "test_grad_sync::SyncScheduler::test_gradient_sync_gpu_multi": "needs several GPUs",
    "test_tracking::TensorBoardTrackingTest::test_init_trackers": "skipped by Accelerate (numpy 2)",
    "test_tracking::WandBTrackingTest::test_wandb": "skipped unconditionally by Accelerate",
    "test_tracking::SwanLabTrackingTest::test_swanlab": "skipped unconditionally by Accelerate",
}

# not run at all (deselected), on both
NOT_RUN = {
    # its offline session can wait ~5 min in one test (307 s for test_log here), and test_log and
    # test_log_images failed on real Accelerate too in one of two runs (the resource monitor's own
    # scalars in the count; a folder still being written when removed);
    # ClearML through our tracker is covered by tests/test_trackers_others.py
    "test_tracking::ClearMLTest": "ClearML's offline mode: minutes per test, flaky on Accelerate itself",
}

# run, and expected to fail on ours only
FAILS_ON_OURS = {
    "test_kwargs_handlers::KwargsHandlerTester::test_torch_dynamo_plugin": (
        "ours leaves unset TorchDynamoPlugin fields None (the launch config reads ACCELERATE_DYNAMO_*), and "
        "refuses its backend 'aot_ts_nvfuser', which torch 2 no longer has"
    ),
}

# the 90 tests the seven files collect, less ClearMLTest's 5 and the 15 skips
PASSES_ON_ACCELERATE = 70


def run_unit_tests(library: str, tmp_path: Path) -> tuple[dict[str, tuple[str, str]], str]:
    """{file::Class::test: (passed|failed|error|skipped, message)} from one pytest run of the files."""
    sources = accelerate_sources(pinned_accelerate_version())
    tests = sources / "tests"
    report = tmp_path / "report.xml"
    command = [sys.executable, "-m", "pytest", *(str(tests / f"{name}.py") for name in FILES)]
    command += ["--rootdir", str(sources), "-p", "no:cacheprovider", "-q", "-W", "ignore"]
    command += ["--junitxml", str(report), "-o", "junit_family=xunit1"]
    command += [arg for node in NOT_RUN for arg in ("--deselect", "tests/" + node.replace("::", ".py::", 1))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)])}
    env["MLFLOW_ALLOW_FILE_STORE"] = "true"  # MLflow 3 keeps the file store its tests read behind this
    if library == "ours":
        command += ["-p", "accelerate_unit_plugin"]
        env["ACCELERATE_TEST_UTILS"] = str(sources / "src" / "accelerate" / "test_utils")
    process = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        output, _ = process.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail(f"Accelerate's unit tests on {library} ran past 600 s:\n{output[-6000:]}")
    finally:  # whatever ended the wait (pytest-timeout, Ctrl-C): nothing of the run is left behind
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert report.exists(), f"pytest wrote no report (exit {process.returncode}):\n{output[-6000:]}"
    return outcomes(report), output


def outcomes(report: Path) -> dict[str, tuple[str, str]]:
    found: dict[str, tuple[str, str]] = {}
    for case in ET.parse(report).iter("testcase"):
        module, _, cls = case.get("classname", "").removeprefix("tests.").partition(".")
        name = "::".join(part for part in (module, cls, case.get("name", "")) if part)
        status, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                status = {"failure": "failed"}.get(child.tag, child.tag)
                message = (child.get("message") or "")[:300]
        found[name] = (status, message)
    return found


def check(found: dict[str, tuple[str, str]], expected_failures: dict[str, str], output: str) -> None:
    """Exactly the expected failures and skips; every other collected test passed."""
    not_passing = {
        name: message for name, (status, message) in found.items() if status in ("failed", "error")
    }
    skipped = {name for name, (status, _) in found.items() if status == "skipped"}
    passed = sorted(name for name, (status, _) in found.items() if status == "passed")
    explain = f"\n{output[-6000:]}"
    assert set(not_passing) == set(expected_failures), f"failing other than expected: {not_passing}{explain}"
    assert skipped == set(SKIPPED_ON_CPU), f"skipped: {sorted(skipped)}{explain}"
    assert not any(name.startswith(tuple(NOT_RUN)) for name in found), f"a deselected test ran{explain}"
    assert len(passed) == PASSES_ON_ACCELERATE - len(expected_failures), f"passed: {passed}{explain}"


@pytest.mark.timeout(720)  # past run_unit_tests' own bound (600 s), which reports the run's output
def test_accelerate_unit_tests_pass_on_ours(tmp_path: Path) -> None:
    found, output = run_unit_tests("ours", tmp_path)
    check(found, FAILS_ON_OURS, output)


@pytest.mark.control
@pytest.mark.timeout(720)
def test_accelerate_unit_tests_pass_on_accelerate(tmp_path: Path) -> None:
    found, output = run_unit_tests("accelerate", tmp_path)
    check(found, {}, output)
