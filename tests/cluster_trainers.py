"""Functions the cluster tests launch (no tests here). They travel to the cluster by value: this
module is not installed, so the launcher pickles it like a notebook's cells."""

from __future__ import annotations

import os
import time
from pathlib import Path


def record_pids(folder: str | None) -> None:
    """Write this worker's pid, its node launcher's pid and that one's parent (the Ray actor or the
    SLURM task's parent) so a test can check that all are gone afterwards."""
    if folder is None:
        return
    launcher = os.getppid()
    with open(f"/proc/{launcher}/stat") as handle:
        agent = int(handle.read().split(") ")[1].split()[1])
    Path(folder, f"pids-{os.getpid()}").write_text(f"{os.getpid()} {launcher} {agent}")


def all_reduce_and_train(seed: int = 0, steps: int = 5, folder: str | None = None):
    """A world of all ranks: an all-reduce, then a few DDP steps; every rank returns its view."""
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, TensorDataset

    from notebook_launcher import Accelerator

    record_pids(folder)
    accelerator = Accelerator()
    total = torch.tensor([float(accelerator.process_index + 1)])
    dist.all_reduce(total)
    torch.manual_seed(seed)
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer, loader = accelerator.prepare(model, optimizer, DataLoader(data, batch_size=8))
    losses = []
    for step, (x, y) in enumerate(loader):
        if step == steps:
            break
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
        accelerator.log({"loss": loss.item()}, step=step)
    print(f"rank {accelerator.process_index} of {accelerator.num_processes}: sum {total.item()}", flush=True)
    weights = accelerator.unwrap_model(model).weight.detach().clone()
    return {
        "rank": accelerator.process_index,
        "world": accelerator.num_processes,
        "sum": total.item(),
        "losses": losses,
        "weights": weights,
    }


def fail_on_rank_one(folder: str | None = None):
    from notebook_launcher import Accelerator

    record_pids(folder)
    accelerator = Accelerator()
    if accelerator.process_index == 1:
        raise ValueError("boom on rank one")
    accelerator.wait_for_everyone()  # rank 0 waits in a collective for the rank that failed
    return "never"


def run_forever(folder: str | None = None):
    from notebook_launcher import Accelerator

    record_pids(folder)
    accelerator = Accelerator()
    print(f"rank {accelerator.process_index} is running", flush=True)
    while True:
        time.sleep(0.2)


def save_in_background(project_dir: str, width: int = 512) -> str:
    """Two steps, then save_state(async_save=True) (~3 MB of weights and AdamW state on each rank)
    and one more step while it is written; the end of the function waits for the save."""
    import torch

    from notebook_launcher import Accelerator
    from notebook_launcher.utils import ProjectConfiguration

    config = ProjectConfiguration(project_dir=project_dir, automatic_checkpoint_naming=True)
    accelerator = Accelerator(project_config=config)
    layer = torch.nn.Linear(width, width)
    model, optimizer = accelerator.prepare(layer, torch.optim.AdamW(layer.parameters()))
    path = None
    for step in range(3):
        accelerator.backward(model(torch.randn(2, width)).sum())
        optimizer.step()
        optimizer.zero_grad()
        if step == 1:
            path = accelerator.save_state(async_save=True)
    return str(path)


def recorded_pids(folder: str) -> set[int]:
    pids: set[int] = set()
    for path in Path(folder).glob("pids-*"):
        pids.update(int(pid) for pid in path.read_text().split())
    return pids


def alive(pids: set[int], wait: float = 15.0) -> set[int]:
    """The pids still running after up to `wait` seconds (zombies count as gone)."""
    deadline = time.monotonic() + wait
    while True:
        running = {pid for pid in pids if _running(pid)}
        if not running or time.monotonic() > deadline:
            return running
        time.sleep(0.2)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


def checkpointed_steps(folder: str, steps: int = 16):
    """Trains `steps` deterministic SGD steps, saving the full state after each; started again, it
    resumes from the latest checkpoint (the ordinary Accelerate pattern)."""
    import torch

    from notebook_launcher import Accelerator

    accelerator = Accelerator(project_dir=folder)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model, optimizer = accelerator.prepare(model, optimizer)
    x, y = torch.linspace(-1, 1, 32).reshape(8, 4), torch.linspace(0, 1, 8).reshape(8, 1)
    start = 0
    if list(Path(folder, "checkpoints").glob("checkpoint_*")):
        accelerator.load_state()  # the latest one
        start = accelerator.save_iteration
    for step in range(start, steps):
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        accelerator.save_state()
        accelerator.print(f"step {step + 1} saved", flush=True)
        time.sleep(0.5)
    weights = accelerator.unwrap_model(model).weight.detach().clone()
    return start, os.environ.get("SLURM_RESTART_COUNT", "0"), weights


class SavedCount:
    """How many steps (or epochs) the weights have seen, saved with them and restored by load_state
    (register_for_checkpointing) under `key`. Here, so it travels to the cluster with this module's
    functions; the restart and DDP trainers import it."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.value = 0

    def state_dict(self) -> dict:
        return {self.key: self.value}

    def load_state_dict(self, state: dict) -> None:
        self.value = int(state[self.key])


def scheduled_step(accelerator, model, optimizer, scheduler, x, y):
    """One training step with an LR scheduler: MSE loss, backward, optimizer and scheduler steps."""
    import torch

    loss = torch.nn.functional.mse_loss(model(x), y)
    accelerator.backward(loss)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    return loss


def preemptible_steps(folder: str, steps: int = 30, every: int = 5, sleep: float = 0.25):
    """Deterministic SGD steps, a checkpoint every `every` steps; when `accelerator.preempted`, it saves
    at once (marking that checkpoint `preempted` with its step) and returns. Started again, it resumes
    from the latest checkpoint."""
    import torch

    from notebook_launcher import Accelerator
    from notebook_launcher.utils import ProjectConfiguration

    config = ProjectConfiguration(project_dir=folder, automatic_checkpoint_naming=True)
    accelerator = Accelerator(project_config=config)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model, optimizer = accelerator.prepare(model, optimizer)
    count = SavedCount("step")
    accelerator.register_for_checkpointing(count)
    x, y = torch.linspace(-1, 1, 32).reshape(8, 4), torch.linspace(0, 1, 8).reshape(8, 1)
    if list(Path(folder, "checkpoints").glob("checkpoint_*")):
        accelerator.load_state()  # the latest one
    start = count.value
    while count.value < steps:
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        count.value += 1
        if count.value % every == 0:
            accelerator.save_state()
        if accelerator.preempted:
            saved = accelerator.save_state()
            if accelerator.is_main_process:
                Path(saved, "preempted").write_text(str(count.value))
            return {"preempted_at": count.value}
        accelerator.print(f"step {count.value}", flush=True)
        time.sleep(sleep)
    weights = accelerator.unwrap_model(model).weight.detach().clone()
    return start, os.environ.get("SLURM_RESTART_COUNT", "0"), weights


def failing_rank_error(where, folder: str):
    """The WorkerError notebook_launch raises when rank 1 of 2 fails on cluster `where` (a test-side
    helper: it runs in the test process, not on the cluster)."""
    import pytest

    from notebook_launcher import WorkerError, notebook_launch

    with pytest.raises(WorkerError) as caught:
        notebook_launch(
            fail_on_rank_one, kwargs={"folder": folder}, num_processes=2, cluster=where, quiet=True
        )
    return caught.value


def background_save_seen(where, folder: str) -> None:
    """Issue 36 on cluster `where` (a test-side helper: it runs in the test process): each rank's
    background write (staged, written) reaches the notebook, the RunView shows the save in flight
    per rank and then the last complete checkpoint, and result.checkpoints names the published
    folder, as for a local launch. The ranks' memory samples (one at least, at the end) come too."""
    from notebook_launcher import notebook_launch
    from notebook_launcher.launch.events import CheckpointSaved, CheckpointWriting, MemorySampled
    from notebook_launcher.widgets import RunView

    view = RunView(refresh_interval=60)
    seen: list[tuple[object, str]] = []

    sampled: set[int] = set()

    def watch(event: object) -> None:
        view(event)
        if isinstance(event, MemorySampled):
            sampled.add(event.rank)
        if isinstance(event, (CheckpointWriting, CheckpointSaved)):
            view.refresh()
            seen.append((event, view.checkpoint_line.value))

    result = notebook_launch(
        save_in_background, args=(folder,), num_processes=2, cluster=where, quiet=True, observers=[watch]
    )
    path = result[0]
    assert Path(path, "model.safetensors").is_file()
    assert [entry["path"] for entry in result.checkpoints] == [path], result.checkpoints
    saved = result.checkpoints[0]
    assert saved["background"] is True and saved["total_s"] >= saved["blocked_s"] >= 0, saved
    reports = {(event.rank, event.state) for event, _ in seen if isinstance(event, CheckpointWriting)}
    assert {(0, "staged"), (1, "staged"), (0, "written"), (1, "written")} <= reports, reports
    in_flight = [text for _, text in seen if f"checkpoint_0 (step {saved['step']}) being written" in text]
    assert any("rank 0" in text and "rank 1" in text for text in in_flight), seen
    assert isinstance(seen[-1][0], CheckpointSaved) and seen[-1][0].path == path, seen
    last = view.checkpoint_line.value
    assert "being written" not in last, last
    assert f"last complete checkpoint: checkpoint_0 (step {saved['step']}," in last, last
    assert sampled == {0, 1}, sampled
