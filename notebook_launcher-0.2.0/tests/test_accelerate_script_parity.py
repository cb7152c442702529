"""examples/accelerate_style_training.py, written in Accelerate 1.x style, runs under `accelerate launch`
with `accelerate` imports and under `notebook-launcher launch` with ours: interrupted after 3
checkpoints, resumed from the latest (mid-epoch, skip_first_batches), to the end. Same loss at every
step, same files on disk, same final weights."""

import json
import math
from pathlib import Path

import pytest
import torch
from accelerate_helpers import accelerate_env, accelerate_launch, two_cpu_processes
from safetensors.torch import load_file
from test_cli_helpers import cli_env, explain, free_port, run_cli

SCRIPT = str(Path(__file__).resolve().parent.parent / "examples" / "accelerate_style_training.py")


def _run_accelerate(tmp_path: Path, extra: list[str]) -> None:
    args = [
        *two_cpu_processes("no", "no", free_port()),
        SCRIPT,
        "--library",
        "accelerate",
        "--project_dir",
        str(tmp_path / "accelerate"),
        "--losses",
        str(tmp_path / "accelerate.jsonl"),
        *extra,
    ]
    result = accelerate_launch(args, cwd=tmp_path, env=accelerate_env(tmp_path))
    assert result.returncode == 0, explain(result)


def _run_ours(tmp_path: Path, extra: list[str]) -> None:
    args = [
        "launch",
        "--num_processes",
        "2",
        SCRIPT,
        "--project_dir",
        str(tmp_path / "ours"),
        "--losses",
        str(tmp_path / "ours.jsonl"),
        *extra,
    ]
    # OMP_NUM_THREADS=1 as accelerate launch sets it: the same kernels with the same thread count
    result = run_cli(args, cwd=tmp_path, env=cli_env(tmp_path, OMP_NUM_THREADS="1"), timeout=240)
    assert result.returncode == 0, explain(result)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("parity")
    for run in (_run_accelerate, _run_ours):
        run(tmp_path, ["--stop_after_saves", "3"])
        run(tmp_path, ["--resume"])
    return tmp_path


def _losses(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.slow
def test_same_loss_at_every_step(runs):
    theirs, ours = _losses(runs / "accelerate.jsonl"), _losses(runs / "ours.jsonl")
    steps = [(r["epoch"], r["step"]) for r in theirs]
    assert steps == [(r["epoch"], r["step"]) for r in ours]
    assert steps == [(e, s) for e in range(3) for s in range(1, 9)]  # every batch once, across the resume
    # Tolerance: both runs execute the same torch kernels on the same data order, weights and thread
    # count, so any difference can only be rounding of the last all-reduce of the loss: 4 ulp of the
    # loss. A real difference in the computation is far above that: the smallest change of the loss
    # from one step to the next in this very run is asserted to exceed the tolerance 1000-fold.
    eps = torch.finfo(torch.float32).eps
    worst = 0.0
    for a, b in zip(theirs, ours, strict=True):
        tolerance = 4 * eps * abs(a["loss"])
        worst = max(worst, abs(a["loss"] - b["loss"]))
        assert math.isclose(a["loss"], b["loss"], rel_tol=0, abs_tol=tolerance), (a, b)
    signal = min(abs(x["loss"] - y["loss"]) for x, y in zip(theirs, theirs[1:], strict=False))
    assert signal > 1000 * 4 * eps * max(abs(r["loss"]) for r in theirs), (
        "the test could not tell steps apart"
    )
    print(f"largest loss difference accelerate vs notebook_launcher: {worst:.3g}")


@pytest.mark.slow
def test_same_files_on_disk(runs):
    theirs, ours = _files(runs / "accelerate"), _files(runs / "ours")
    assert theirs == ours
    assert "checkpoints/checkpoint_4/model.safetensors" in ours and "model/model.safetensors" in ours
    assert not any("checkpoint_3" in f for f in ours)  # total_limit=2 rotation after the resume


@pytest.mark.slow
def test_same_weights_in_the_checkpoints_and_the_saved_model(runs):
    for name in ("model/model.safetensors", "checkpoints/checkpoint_5/model.safetensors"):
        theirs, ours = load_file(runs / "accelerate" / name), load_file(runs / "ours" / name)
        assert sorted(theirs) == sorted(ours), name  # same keys (the user's module's, no DDP prefix)
        for key in theirs:
            # weights: the same argument as the losses, per element (4 ulp of the value)
            torch.testing.assert_close(
                ours[key], theirs[key], rtol=4 * torch.finfo(torch.float32).eps, atol=0
            )
