"""Training functions for the FSDP / DeepSpeed tests: a small transformer of nn.TransformerEncoderLayer
blocks, trained through the Accelerator (launched with notebook_launch) or with plain PyTorch."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from trainers import StopAndResume, mse_steps, nudge_weights  # shared with the DDP tests

from notebook_launcher import Accelerator, set_seed

FEATURES, WIDTH, SEQ = 8, 16, 4


class TinyTransformer(nn.Module):
    def __init__(self, blocks: int = 2) -> None:
        super().__init__()
        self.embed = nn.Linear(FEATURES, WIDTH)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(WIDTH, 2, 32, dropout=0.0, batch_first=True) for _ in range(blocks)
        )
        self.head = nn.Linear(WIDTH, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        return self.head(h)


def transformer_model() -> TinyTransformer:
    torch.manual_seed(0)
    return TinyTransformer()


def transformer_data(n: int = 64) -> TensorDataset:
    g = torch.Generator().manual_seed(4321)
    x = torch.randn(n, SEQ, FEATURES, generator=g)
    y = x.sum(dim=-1, keepdim=True).tanh() + 0.05 * torch.randn(n, SEQ, 1, generator=g)
    return TensorDataset(x, y)


SGD = dict(batch_size=8, optimizer="sgd", lr=0.05)  # train_transformer's kwargs for weight comparisons


def assert_same_weights(got: dict, want: dict, atol: float) -> None:
    assert got.keys() == want.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=atol, rtol=0, msg=f"parameter {name} differs")


def _optimizer(params, lr: float, kind: str = "adamw") -> torch.optim.Optimizer:
    """SGD+momentum wherever weights are compared: AdamW turns gradients that are rounding noise (the
    attention key bias has a true gradient of zero) into full-size steps, by amounts that depend on
    the CPU's kernels, while SGD keeps them noise. AdamW (the default) where losses are compared."""
    if kind == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    return torch.optim.AdamW(params, lr=lr, weight_decay=0.01)


def reference_transformer(
    batch_size: int, epochs: int = 2, lr: float = 1e-2, clip: float | None = 0.5
) -> dict:
    """Plain PyTorch, one process: the weights every strategy must reach."""
    model = transformer_model()
    opt = _optimizer(model.parameters(), lr)
    for _ in range(epochs):
        for x, y in DataLoader(transformer_data(), batch_size=batch_size):
            nn.functional.mse_loss(model(x), y).backward()
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
            opt.zero_grad()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def train_transformer(
    batch_size: int,
    accumulation: int = 1,
    epochs: int = 2,
    lr: float = 1e-2,
    clip: float | None = 0.5,
    optimizer_after_prepare: bool | str = False,
    optimizer: str = "adamw",
    pretend_machines: int = 1,
    nudge: bool = False,
) -> dict:
    """The same loop through the Accelerator; returns full weights, losses and the local shard size.

    pretend_machines=2 makes this worker believe its 2 processes sit on 2 machines (one each), so
    HYBRID_SHARD builds a (2, 1) mesh: replicate across the "machines", shard within each.
    nudge=True moves every weight by one ulp before each step (trainers.nudge_weights): the same
    training with rounding-sized noise added, whose gap to the plain run is the noise floor."""
    assert not (nudge and accumulation > 1), "a noise-floor run steps on every batch"
    if pretend_machines > 1:  # a consistent world: each "machine" numbers its processes from 0
        per_machine = int(os.environ["WORLD_SIZE"]) // pretend_machines
        rank = int(os.environ["RANK"])
        os.environ["LOCAL_WORLD_SIZE"] = str(per_machine)
        os.environ["LOCAL_RANK"] = str(rank % per_machine)
        os.environ["GROUP_RANK"] = str(rank // per_machine)
    set_seed(7)
    acc = Accelerator(gradient_accumulation_steps=accumulation)
    model = transformer_model()
    loader = DataLoader(transformer_data(), batch_size=batch_size)
    if optimizer_after_prepare == "prepared-first":  # an optimizer prepared before its model
        opt = acc.prepare(_optimizer(model.parameters(), lr, optimizer))
        model, loader = acc.prepare(model, loader)
    elif optimizer_after_prepare:
        model, loader = acc.prepare(model, loader)
        opt = acc.prepare(_optimizer(model.parameters(), lr, optimizer))
    else:
        model, opt, loader = acc.prepare(model, _optimizer(model.parameters(), lr, optimizer), loader)
    local = sum(_local_numel(p) for p in model.parameters())
    mesh = getattr(getattr(acc.strategy, "_mesh", None), "shape", None)
    losses = []
    for _ in range(epochs):
        for x, y in loader:
            if nudge:
                nudge_weights(model.parameters(), len(losses))
            with acc.accumulate(model):
                loss = nn.functional.mse_loss(model(x), y)
                acc.backward(loss)
                if clip is not None and acc.sync_gradients:
                    acc.clip_grad_norm_(model.parameters(), clip)
                opt.step()
                opt.zero_grad()
            losses.append(acc.reduce(loss.detach(), "mean").item())
    weights = acc.get_state_dict(model)
    total = sum(v.numel() for v in weights.values())
    acc.end_training()
    return {"weights": weights, "losses": losses, "local_numel": local, "total_numel": total, "mesh": mesh}


def _local_numel(p: torch.Tensor) -> int:
    """Elements this rank holds: an FSDP DTensor's shard, a ZeRO-3 partition, or the whole tensor."""
    if hasattr(p, "ds_tensor"):
        return p.ds_tensor.numel()
    to_local = getattr(p, "to_local", None)
    return to_local().numel() if to_local is not None else p.numel()


def train_with_checkpoint(
    folder: str,
    stop_after: tuple[int, int] | None,
    resume: bool,
    batch_size: int = 8,
    epochs: int = 2,
    nudge: bool = False,
) -> dict:
    """Shuffled SGD+momentum training; save and stop at (epoch, batch), or resume from folder.

    One process with batch_size=16 sees the same samples per step as two with batch_size=8.
    nudge: the same training with every weight moved by one ulp per step (its noise floor)."""
    set_seed(3)
    acc = Accelerator()
    model = transformer_model()
    loader = DataLoader(transformer_data(), batch_size=batch_size, shuffle=True)
    model, opt, loader = acc.prepare(model, _optimizer(model.parameters(), 1e-2, "sgd"), loader)
    run = StopAndResume(acc, folder, stop_after, resume)
    for epoch, step, (x, y) in run.steps(loader, epochs):
        if nudge:
            nudge_weights(model.parameters(), 100 * epoch + step)
        acc.backward(nn.functional.mse_loss(model(x), y))
        opt.step()
        opt.zero_grad()
    if run.stopped:
        acc.end_training()
        return {"stopped": True, "files": sorted(p.name for p in Path(folder).iterdir())}
    weights = acc.get_state_dict(model)
    acc.end_training()
    return {"weights": weights}


def train_and_save_model(folder: str, **accelerator_kwargs) -> dict:
    """One epoch of SGD, then save_model(); returns the saved path and get_state_dict()."""
    acc = Accelerator(**accelerator_kwargs)
    model = transformer_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    model, opt, loader = acc.prepare(model, opt, DataLoader(transformer_data(), batch_size=8))
    for x, y in loader:
        acc.backward(nn.functional.mse_loss(model(x), y))
        opt.step()
        opt.zero_grad()
    acc.save_model(model, folder)
    path = Path(folder) / "model.safetensors"  # Accelerate's save_model layout
    weights = acc.get_state_dict(model)
    acc.end_training()
    return {"path": str(path), "weights": weights}


def train_seed_model(
    batch_size: int,
    accumulation: int = 1,
    epochs: int = 3,
    lr: float = 0.05,
    scheduler: bool = False,
    nudge: bool = False,
) -> dict:
    """tests/trainers.py's regression loop (the seed model, SGD), returning get_state_dict().
    nudge: every weight moved by one ulp before each step (the noise floor)."""
    from trainers import regression_data, regression_model

    set_seed(7)
    acc = Accelerator(gradient_accumulation_steps=accumulation)
    model = regression_model()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    loader = DataLoader(regression_data(), batch_size=batch_size)
    objects = [model, opt, loader]
    if scheduler:
        objects.append(torch.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.5))
    model, opt, loader, *sched = acc.prepare(*objects)
    assert not (nudge and accumulation > 1), "a noise-floor run steps on every batch"
    for epoch in range(epochs):
        for step, (x, y) in enumerate(loader):
            if nudge:
                nudge_weights(model.parameters(), 100 * epoch + step)
            with acc.accumulate(model):
                acc.backward(nn.functional.mse_loss(model(x), y))
                opt.step()
                for s in sched:
                    s.step()
                opt.zero_grad()
    weights = acc.get_state_dict(model)
    acc.end_training()
    return weights


def compute_dtypes(steps: int = 3) -> dict:
    """The dtype a block's weight has while its forward runs, the sharded (stored) dtype, the losses."""
    acc = Accelerator()
    model = transformer_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, opt = acc.prepare(model, opt)
    seen = []
    model.blocks[0].linear1.register_forward_pre_hook(
        lambda module, args: seen.append(str(module.weight.dtype))
    )
    x, y = transformer_data(16).tensors
    losses = mse_steps(acc, model, opt, [(x, y)] * steps)
    stored = str(next(model.parameters()).dtype)
    acc.end_training()
    return {"in_forward": seen[0], "stored": stored, "losses": losses}


def fsdp_mechanics(steps: int = 2) -> dict:
    """What the FSDP settings change inside a step, observed rather than configured:
    how often a block's first Linear runs per step (2 = recomputed in backward: activation
    checkpointing), which block weights are still gathered between forward and backward
    (SHARD_GRAD_OP keeps them, FULL_SHARD frees them), and where the shards live (CPU offload)."""
    from torch.distributed.fsdp import CPUOffloadPolicy

    acc = Accelerator()
    model = transformer_model()
    model, opt = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=1e-2))
    calls = []
    model.blocks[0].linear1.register_forward_hook(lambda *_: calls.append(1))
    x, y = transformer_data(16).tensors
    gathered, per_step = None, []
    for _ in range(steps):
        before = len(calls)
        out = model(x)
        if gathered is None:
            gathered = sum(
                not hasattr(p, "to_local") for block in model.blocks for p in block.parameters(recurse=True)
            )
        acc.backward(nn.functional.mse_loss(out, y))
        opt.step()
        opt.zero_grad()
        per_step.append(len(calls) - before)
    group = model.blocks[0]._get_fsdp_state()._fsdp_param_group
    acc.end_training()
    return {
        "linear1_calls_per_step": per_step,
        "block_params_gathered_after_forward": gathered,
        "block_params": sum(1 for block in model.blocks for _ in block.parameters()),
        "cpu_offload": isinstance(group.offload_policy, CPUOffloadPolicy),
    }
