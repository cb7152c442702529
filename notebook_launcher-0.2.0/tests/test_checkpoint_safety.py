"""Checkpoints are pickles: everything but custom objects loads with torch.load(weights_only=True),
so a tampered file fails to load instead of running code (issue 11, section 8)."""

from __future__ import annotations

import pickle

import pytest
import torch

from notebook_launcher import Accelerator, AcceleratorError
from notebook_launcher.runtime import reset_state


class RunsCode:
    """What an attacker would put in a checkpoint file: unpickling it calls a function of theirs."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.fixture
def accelerator():
    reset_state()
    yield Accelerator(mixed_precision="fp16")  # fp16 on CPU has a GradScaler: its file is written too
    reset_state()


@pytest.mark.parametrize("tampered", ["optimizer.bin", "scheduler.bin", "scaler.pt", "random_states_0.pkl"])
def test_a_tampered_checkpoint_file_is_refused_without_running_its_code(accelerator, tmp_path, tampered):
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    accelerator.backward(model(torch.ones(1, 2)).sum())
    optimizer.step()
    folder = tmp_path / "ckpt"
    accelerator.save_state(folder)
    accelerator.load_state(folder)  # the untouched checkpoint loads, every file with weights_only=True

    assert (folder / tampered).exists(), sorted(p.name for p in folder.iterdir())
    marker = tmp_path / "code-ran"
    torch.save({"state": RunsCode(str(marker))}, folder / tampered)
    with pytest.raises((pickle.UnpicklingError, AcceleratorError), match="Weights only load failed"):
        accelerator.load_state(folder)
    assert not marker.exists()
