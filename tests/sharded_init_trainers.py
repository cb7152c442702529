"""Training functions for the sharded-initialisation tests: the small transformer of
sharding_trainers.py built ordinarily, inside `accelerator.sharded_init()`, or on the meta device
everywhere (`init_empty_weights`), then prepared, optionally loaded from a checkpoint, trained."""

from __future__ import annotations

import contextlib

import torch
from sharding_trainers import TinyTransformer, transformer_data
from torch import nn
from torch.utils.data import DataLoader
from trainers import mse_steps

from notebook_launcher import Accelerator, init_empty_weights, set_seed


class MLP(nn.Module):
    """Linear layers only: every parameter is initialised by its own module (zero.Init is exact)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class WithRawParameter(nn.Module):
    """A module holding a parameter directly, without reset_parameters() (common in user code)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = TinyTransformer()
        self.scale = nn.Parameter(torch.ones(16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x) * self.scale.mean()


MODELS = {"transformer": TinyTransformer, "mlp": MLP, "raw": WithRawParameter}


def build(accelerator: Accelerator, how: str, kind: str = "transformer") -> nn.Module:
    """Seed 0, then the model built the way `how` says: ordinary, sharded_init, meta (every rank),
    meta_but_rank0 (by hand: init_empty_weights on every rank but the first)."""
    torch.manual_seed(0)
    context = {
        "ordinary": contextlib.nullcontext,
        "sharded_init": accelerator.sharded_init,
        "meta": init_empty_weights,
        "meta_but_rank0": init_empty_weights if not accelerator.is_main_process else contextlib.nullcontext,
    }[how]()
    with context:
        return MODELS[kind]()


def local_part(param: torch.Tensor) -> torch.Tensor:
    """This rank's piece of a parameter: an FSDP shard or a ZeRO-3 partition."""
    if hasattr(param, "ds_tensor"):
        return param.ds_tensor.detach().clone()
    to_local = getattr(param, "to_local", None)
    return (to_local() if to_local is not None else param).detach().clone()


def init_then_train(
    how: str,
    kind: str = "transformer",
    epochs: int = 1,
    save_to: str | None = None,
    load_from: str | None = None,
) -> dict:
    """Build, prepare (optimizer created before prepare), optionally save/load a checkpoint, train;
    returns the full weights right after prepare (and load) and after training, and local pieces."""
    set_seed(7)
    accelerator = Accelerator()
    model = build(accelerator, how, kind)
    built_on_meta = any(p.is_meta for p in model.parameters())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = DataLoader(transformer_data() if kind != "mlp" else _mlp_data(), batch_size=8)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    if save_to:
        accelerator.save_state(save_to)
    if load_from:
        accelerator.load_state(load_from)
    initial = {k: v.clone() for k, v in accelerator.get_state_dict(model).items()}  # DDP's are live
    pieces = {name: local_part(p) for name, p in accelerator.unwrap_model(model).named_parameters()}
    losses = []
    for _ in range(epochs):
        losses += mse_steps(accelerator, model, optimizer, loader)
    trained = accelerator.get_state_dict(model)
    accelerator.end_training()
    return {"initial": initial, "trained": trained, "pieces": pieces, "losses": losses, "meta": built_on_meta}


def _mlp_data():
    x, y = transformer_data().tensors
    return torch.utils.data.TensorDataset(x.mean(dim=1), y.mean(dim=1))


def ordinary_weights(kind: str = "transformer") -> dict:
    torch.manual_seed(0)
    return {k: v.clone() for k, v in MODELS[kind]().state_dict().items()}


def train_then_save_state(folder: str) -> dict:
    """One epoch of SGD, then save_state(folder); returns the full weights at that moment."""
    set_seed(7)
    accelerator = Accelerator()
    model = build(accelerator, "ordinary")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model, optimizer, loader = accelerator.prepare(
        model, optimizer, DataLoader(transformer_data(), batch_size=8)
    )
    for x, y in loader:
        accelerator.backward(nn.functional.mse_loss(model(x), y))
        optimizer.step()
        optimizer.zero_grad()
    accelerator.save_state(folder)
    weights = accelerator.get_state_dict(model)
    accelerator.end_training()
    return weights
