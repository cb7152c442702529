"""A training script written the way Accelerate 1.x's "by feature" examples are, runnable on
HuggingFace Accelerate or on notebook_launcher with only the imports changed:

    accelerate launch --num_processes 2 examples/accelerate_style_training.py --library accelerate --project_dir out
    notebook-launcher launch --num_processes 2 examples/accelerate_style_training.py --project_dir out

(On a machine without GPUs, `accelerate launch` needs `--multi_gpu` and ACCELERATE_USE_CPU=true in the
environment to start more than one process.)

It uses DataLoaderConfiguration (seedable shuffling), ProjectConfiguration with automatic checkpoint
naming and total_limit, a GradientAccumulationPlugin, a checkpointed progress object, and resumes from
the latest checkpoint with skip_first_batches. --log_with tensorboard turns on experiment tracking
where the library provides it. The test suite runs it under both libraries and compares the losses
and the files written (tests/test_accelerate_script_parity.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--library", choices=("notebook_launcher", "accelerate"), default="notebook_launcher")
parser.add_argument("--project_dir", required=True)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument(
    "--stop_after_saves", type=int, default=0, help="exit after this many checkpoints (0: never)"
)
parser.add_argument("--resume", action="store_true", help="continue from the latest checkpoint")
parser.add_argument("--losses", default=None, help="append one JSON line per batch: epoch, step, loss")
parser.add_argument("--log_with", default=None, help="an experiment tracker, e.g. tensorboard")
args = parser.parse_args()

if args.library == "accelerate":
    from accelerate import Accelerator
    from accelerate.utils import (
        DataLoaderConfiguration,
        GradientAccumulationPlugin,
        ProjectConfiguration,
        set_seed,
    )
else:
    from notebook_launcher import Accelerator
    from notebook_launcher.utils import (
        DataLoaderConfiguration,
        GradientAccumulationPlugin,
        ProjectConfiguration,
        set_seed,
    )


class Progress:
    """Where training is, saved with every checkpoint (register_for_checkpointing)."""

    def __init__(self) -> None:
        self.epoch = 0
        self.step = 0

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "step": self.step}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.step = state["epoch"], state["step"]


def make_data() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=g)
    y = x @ torch.randn(8, 1, generator=g) + 0.1 * torch.randn(64, 1, generator=g)
    return TensorDataset(x, y)


def main() -> None:
    accelerator = Accelerator(
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True),
        project_config=ProjectConfiguration(
            project_dir=args.project_dir, automatic_checkpoint_naming=True, total_limit=2
        ),
        gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=2),
        log_with=args.log_with,
    )
    if args.log_with:
        accelerator.init_trackers("accelerate_style_training", config={"lr": 0.02, "batch_size": 4})
    set_seed(42)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.02)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.7)
    loader = DataLoader(make_data(), batch_size=4, shuffle=True)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    progress = Progress()
    accelerator.register_for_checkpointing(progress)

    if args.resume:
        accelerator.load_state()  # the latest checkpoint under project_dir/checkpoints
        folders = os.listdir(os.path.join(args.project_dir, "checkpoints"))
        latest = max(int(re.findall(r"\d+", name)[-1]) for name in folders)
        accelerator.project_configuration.iteration = latest + 1  # Accelerate does not move it on load
    if progress.step == len(loader):
        progress.epoch, progress.step = progress.epoch + 1, 0
    starting_epoch, resume_step = progress.epoch, progress.step

    saves = 0
    for epoch in range(starting_epoch, args.epochs):
        model.train()
        loader.set_epoch(epoch)
        skip = resume_step if epoch == starting_epoch else 0
        active = accelerator.skip_first_batches(loader, skip) if skip else loader
        for step, (x, y) in enumerate(active, start=skip + 1):
            with accelerator.accumulate(model):
                loss = nn.functional.mse_loss(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            mean_loss = accelerator.reduce(loss.detach(), reduction="mean").item()
            accelerator.log({"loss": mean_loss}, step=epoch * len(loader) + step)
            if accelerator.is_main_process and args.losses:
                with open(args.losses, "a") as out:
                    out.write(json.dumps({"epoch": epoch, "step": step, "loss": mean_loss}) + "\n")
            if accelerator.sync_gradients and step % 4 == 0:
                progress.epoch, progress.step = epoch, step
                accelerator.save_state()
                saves += 1
                if saves == args.stop_after_saves:
                    accelerator.end_training()
                    return
    accelerator.wait_for_everyone()
    accelerator.save_model(model, os.path.join(args.project_dir, "model"))
    accelerator.end_training()


if __name__ == "__main__":
    main()
