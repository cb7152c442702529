"""Training functions the multi-process tests launch (importable, so spawn can find them too)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from cluster_trainers import SavedCount
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from notebook_launcher import Accelerator, DataLoaderConfiguration, set_seed


def nudge_weights(parameters, step: int) -> None:
    """Move every weight one float step (ulp) up or down, at random but the same on every rank: as if
    every weight's last update had rounded the other way. A run with this nudge before each step,
    against one without, measures how much rounding noise this training amplifies on this machine,
    from the first forward pass on; tests allow a stated multiple of that (the noise floor,
    tests/noise_floor.py), never a fixed figure."""
    generator = torch.Generator().manual_seed(1000 + step)
    with torch.no_grad():
        for p in parameters:
            local = p.to_local() if hasattr(p, "to_local") else p  # FSDP: this rank's shard
            up = torch.rand(local.shape, generator=generator) < 0.5
            away = torch.full_like(local, float("inf"))
            local.copy_(torch.nextafter(local, torch.where(up, away, -away)))


def mse_steps(acc: Accelerator, model, optimizer, batches) -> list[float]:
    """One step per (x, y) batch: MSE loss, backward through the Accelerator, optimizer step; the
    loss of each step."""
    losses = []
    for x, y in batches:
        loss = nn.functional.mse_loss(model(x), y)
        acc.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def regression_data(n: int = 128, features: int = 10) -> TensorDataset:
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(n, features, generator=g)
    w = torch.randn(features, 1, generator=g)
    y = x @ w + 0.1 * torch.randn(n, 1, generator=g)
    return TensorDataset(x, y)


def regression_model(dropout: float = 0.0) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Dropout(dropout), nn.Linear(16, 1))


def reference_weights(
    batch_size: int, epochs: int = 3, lr: float = 0.05, nudge: bool = False
) -> dict[str, torch.Tensor]:
    """Plain PyTorch, one process, no notebook_launcher at all: the ground truth (nudge: its noise floor)."""
    model = regression_model()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    loader = DataLoader(regression_data(), batch_size=batch_size, shuffle=False)
    for epoch in range(epochs):
        for step, (x, y) in enumerate(loader):
            if nudge:
                nudge_weights(model.parameters(), 100 * epoch + step)
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def train_regression(
    batch_size: int,
    accumulation: int = 1,
    split_batches: bool = False,
    shuffle: bool = False,
    epochs: int = 3,
    lr: float = 0.05,
    nudge: bool = False,
) -> dict[str, torch.Tensor]:
    """The same loop through Accelerator; returns the final weights (every rank).
    nudge: every weight moved by one ulp before each step (the noise floor)."""
    set_seed(7)
    acc = Accelerator(
        gradient_accumulation_steps=accumulation,
        dataloader_config=DataLoaderConfiguration(split_batches=split_batches),
    )
    model = regression_model()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    loader = DataLoader(regression_data(), batch_size=batch_size, shuffle=shuffle)
    model, opt, loader = acc.prepare(model, opt, loader)
    assert not (nudge and accumulation > 1), "a noise-floor run steps on every batch"
    for epoch in range(epochs):
        for step, (x, y) in enumerate(loader):
            if nudge:
                nudge_weights(model.parameters(), 100 * epoch + step)
            with acc.accumulate(model):  # Accelerate's order: backward, step, zero_grad
                acc.backward(nn.functional.mse_loss(model(x), y))
                opt.step()
                opt.zero_grad()
    state = {k: v.detach().cpu().clone() for k, v in acc.unwrap_model(model).state_dict().items()}
    acc.end_training()
    return state


class IndexDataset(Dataset):
    """Sample i is the tensor [i]: gathered predictions can be checked against the dataset exactly."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor([float(i)])


def gather_eval_indices(n: int, batch_size: int = 32) -> list[int]:
    acc = Accelerator()
    loader = acc.prepare(DataLoader(IndexDataset(n), batch_size=batch_size))
    seen = []
    for batch in loader:
        seen.append(acc.gather_for_metrics(batch))
    return torch.cat(seen).flatten().long().tolist()


class StopAndResume:
    """The epochs of a training that stops after the step `stop_after` = (epoch, step), its state
    saved to `folder`, or (`resume`) goes on from the state saved there: the epoch is saved with it."""

    def __init__(self, acc: Accelerator, folder: str, stop_after: tuple[int, int] | None, resume: bool):
        self.acc, self.folder, self.stop_after = acc, folder, stop_after
        self.epoch = SavedCount("epoch")
        acc.register_for_checkpointing(self.epoch)
        if resume:
            acc.load_state(folder)
        self.stopped = False

    def steps(self, loader, epochs: int) -> Iterator[tuple[int, int, Any]]:
        """(epoch, step, batch) until `epochs` epochs are done, or up to the stop (then `stopped`)."""
        while self.epoch.value < epochs:
            for step, batch in enumerate(loader):
                yield self.epoch.value, step, batch
                if (self.epoch.value, step) == self.stop_after:
                    self.acc.save_state(self.folder)
                    self.stopped = True
                    return
            self.epoch.value += 1


def train_with_checkpoint(folder: str, stop_after: tuple[int, int] | None, resume: bool) -> dict:
    """Shuffle + dropout training; optionally save and stop at (epoch, batch); optionally resume."""
    set_seed(11)
    acc = Accelerator()
    model = regression_model(dropout=0.2)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.8)
    loader = DataLoader(regression_data(), batch_size=8, shuffle=True)
    model, opt, loader, sched = acc.prepare(model, opt, loader, sched)
    run = StopAndResume(acc, folder, stop_after, resume)
    for _, _, (x, y) in run.steps(loader, epochs=3):
        opt.zero_grad()
        acc.backward(nn.functional.mse_loss(model(x), y))
        opt.step()
        sched.step()
    if run.stopped:
        acc.end_training()
        return {"stopped": True}
    state = {k: v.detach().cpu().clone() for k, v in acc.unwrap_model(model).state_dict().items()}
    acc.end_training()
    return state
