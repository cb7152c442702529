"""Training functions for the restart and preemption tests (importable by workers and CLI scripts).

`train` is the ordinary Accelerate resume pattern: automatic checkpoint naming, save_state() every
`every` steps, load_state() at the start when a checkpoint exists; shuffling, dropout, momentum, an
LR scheduler and a registered object, so an inexact resume shows in the weights.
"""

from __future__ import annotations

import os
import signal
import time

from cluster_trainers import SavedCount, scheduled_step


def train(
    project_dir: str,
    total_steps: int = 24,
    every: int = 4,
    kill_rank: int | None = None,
    kill_at: int | None = None,
    kill_how: str = "SIGKILL",
    total_limit: int | None = 2,
    preempt: dict | None = None,
    sleep: float = 0.0,
    async_save: bool = False,
    kill_index: int = 0,
    periodic: bool = False,
) -> dict:
    """Train to total_steps; rank kill_rank dies (kill_how) after step kill_at of the first attempt.

    kill_how: "SIGKILL" (the OOM killer), "exit" (os._exit without an exception), "raise" (a Python
    error), "in_save" (SIGKILL while the next save_state() is writing). preempt={"rank", "at", "to",
    "in_async_write" (async_save: SIGKILL from the background writer, just before its write number
    kill_index of the save made after step kill_at, a multiple of every). preempt={"rank", "at", "to",
    "signal"} sends that signal to this rank's worker ("worker") or to the launcher ("launcher")
    after step `at`; the loop then saves and returns when accelerator.preempted. The ranks agree on a
    request every preempt["check_seconds"] (default 0: at every optimizer step, so a test knows the step).
    """
    import torch
    from torch import nn

    from notebook_launcher import Accelerator
    from notebook_launcher.utils import ProjectConfiguration, set_seed

    if preempt:
        os.environ["NOTEBOOK_LAUNCHER_PREEMPTION_CHECK_SECONDS"] = str(preempt.get("check_seconds", 0))
        from notebook_launcher.runtime.world import preemption
    config = ProjectConfiguration(
        project_dir=project_dir,
        automatic_checkpoint_naming=True,
        total_limit=total_limit,
        async_save=async_save,
        save_every_n_steps=every if periodic else None,  # then no save_state() call in the loop
    )
    accelerator = Accelerator(project_config=config)
    set_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.Dropout(0.3), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=5, gamma=0.7)
    data = torch.utils.data.TensorDataset(torch.randn(40, 4), torch.randn(40, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=4, shuffle=True)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    progress = SavedCount("step")  # a registered object: the global step, restored by load_state()
    accelerator.register_for_checkpointing(progress)
    first = accelerator.restart_count == 0
    rank = accelerator.process_index
    if os.path.isdir(os.path.join(project_dir, "checkpoints")) and os.listdir(
        os.path.join(project_dir, "checkpoints")
    ):
        accelerator.load_state()
    resumed_at = progress.value
    if kill_how == "in_save" and first and rank == kill_rank:

        def die_while_saving(models, weights, output_dir):
            if progress.value >= kill_at:
                with open(os.path.join(output_dir, "half_written"), "w") as f:
                    f.write("x")
                os.kill(os.getpid(), signal.SIGKILL)

        accelerator.register_save_state_pre_hook(die_while_saving)
    if kill_how == "in_async_write" and first and rank == kill_rank:
        from notebook_launcher.runtime.checkpointing import async_save as saving

        doomed = f".checkpoint_{kill_at // every - 1}.partial"  # the save after step kill_at

        def die_while_writing(index, path):
            if path.parent.name == doomed and index == kill_index:
                os.kill(os.getpid(), signal.SIGKILL)

        saving.saver().before_write = die_while_writing
    while progress.value < total_steps:
        for x, y in loader:
            scheduled_step(accelerator, model, optimizer, scheduler, x, y)
            progress.value += 1
            if sleep:
                time.sleep(sleep)
            if progress.value % every == 0 and not periodic:
                accelerator.save_state()
            if first and rank == kill_rank and progress.value == kill_at:
                if kill_how == "SIGKILL":
                    os.kill(os.getpid(), signal.SIGKILL)
                if kill_how == "exit":
                    os._exit(3)
                if kill_how == "raise":
                    raise ValueError(f"bad batch at step {progress.value}")
            if preempt and first and rank == preempt["rank"] and progress.value == preempt["at"]:
                target = os.getpid() if preempt["to"] == "worker" else os.getppid()
                os.kill(target, getattr(signal, preempt["signal"]))
            if accelerator.preempted:
                saved = accelerator.save_state()
                return {
                    "preempted_at": progress.value,
                    "saved": str(saved),
                    "rank": rank,
                    "agreement_checks": preemption.checks,
                }
            if progress.value >= total_steps:
                break
    weights = accelerator.unwrap_model(model).state_dict()
    return {
        "weights": {k: v.detach().clone() for k, v in weights.items()},
        "restart_count": accelerator.restart_count,
        "resumed_at": resumed_at,
        "lr": scheduler.get_last_lr()[0],
    }
