"""gather_for_metrics exactness and save_state/load_state resumption (issue 2, items 3 and 5)."""

import pytest
import torch
from safetensors.torch import load_file
from trainers import gather_eval_indices, train_with_checkpoint

from notebook_launcher import notebook_launch


@pytest.mark.parametrize("size", [1001, 82, 512])
def test_gather_for_metrics_returns_exactly_the_eval_set(size):
    result = notebook_launch(gather_eval_indices, args=(size,), num_processes=2, quiet=True, timeout=120)
    assert result[0] == list(range(size))
    assert result[1] == list(range(size))


def test_resumed_run_ends_with_the_same_weights(tmp_path):
    folder = str(tmp_path / "ckpt")
    whole = notebook_launch(train_with_checkpoint, args=(folder, None, False), num_processes=2, quiet=True)
    stopped = notebook_launch(
        train_with_checkpoint, args=(folder, (1, 4), False), num_processes=2, quiet=True
    )
    assert stopped[0] == {"stopped": True}
    files = sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    assert files == [  # Accelerate's layout (the loader positions ride in random_states_*.pkl)
        "custom_checkpoint_0.pkl",
        "model.safetensors",
        "optimizer.bin",
        "random_states_0.pkl",
        "random_states_1.pkl",
        "scheduler.bin",
    ]
    assert not list(tmp_path.glob(".ckpt*")), "no temporary folder left behind"
    resumed = notebook_launch(train_with_checkpoint, args=(folder, None, True), num_processes=2, quiet=True)
    # the resumed run repeats the uninterrupted run's arithmetic on the same machine: bit for bit
    for name, want in whole[0].items():
        torch.testing.assert_close(resumed[0][name], want, atol=0, rtol=0, msg=name)
    # the checkpoint really was mid-run: its weights are not the final ones
    saved = load_file(tmp_path / "ckpt" / "model.safetensors")
    assert not torch.allclose(saved["0.weight"], whole[0]["0.weight"])


def test_a_checkpoint_overwrites_atomically(tmp_path):
    from notebook_launcher import Accelerator
    from notebook_launcher.runtime import reset_state

    acc = Accelerator()
    model = acc.prepare(torch.nn.Linear(2, 2))
    target = tmp_path / "ckpt"
    acc.save_state(target)
    first = load_file(target / "model.safetensors")
    with torch.no_grad():
        model.weight.add_(1.0)
    acc.save_state(target)
    second = load_file(target / "model.safetensors")
    assert torch.equal(second["weight"], first["weight"] + 1.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    reset_state()
