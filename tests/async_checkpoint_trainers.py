"""Training functions for tests/test_async_checkpoint.py (importable by the workers).

`train` saves with save_state(async_save=True) at chosen steps and keeps training while the save is
written; the writer is held (the saver's before_write seam) until the training has changed every
weight again, so a save that did not stage its own copy would write the later weights.
"""

from __future__ import annotations

import os
import signal
import threading
import weakref
from pathlib import Path

from cluster_trainers import SavedCount, scheduled_step


class _Alive:
    """A local whose end (the function's frame going away) releases a held writer."""


def train(
    project_dir: str,
    total_steps: int = 8,
    save_at: tuple[int, ...] = (3,),
    resume: bool = False,
    total_limit: int | None = None,
    hold_writer: bool = True,
    return_at_save: bool = False,
    width: int = 32,
) -> dict:
    """AdamW + StepLR + shuffled data; async saves after the steps in save_at (automatic naming).

    resume: load the latest checkpoint first. return_at_save: return right after the first save,
    with its writer held until the function has returned (the end of the function must wait)."""
    import torch
    from torch import nn

    from notebook_launcher import Accelerator
    from notebook_launcher.runtime.checkpointing import async_save
    from notebook_launcher.utils import ProjectConfiguration, set_seed

    config = ProjectConfiguration(
        project_dir=project_dir, automatic_checkpoint_naming=True, total_limit=total_limit, async_save=True
    )
    accelerator = Accelerator(project_config=config)
    set_seed(0)
    model = nn.Sequential(nn.Linear(8, width), nn.Dropout(0.2), nn.ReLU(), nn.Linear(width, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.8)
    data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=4, shuffle=True)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    progress = SavedCount("step")
    accelerator.register_for_checkpointing(progress)
    if resume:
        accelerator.load_state()
    trained_after_save = threading.Event()
    function_returned = threading.Event()
    alive = _Alive()
    weakref.finalize(alive, function_returned.set)  # set when this function's frame is gone
    if hold_writer:
        release = function_returned if return_at_save else trained_after_save
        async_save.saver().before_write = lambda index, path: release.wait() if index == 0 else None
    saved: list[str] = []
    while progress.value < total_steps:
        for x, y in loader:
            scheduled_step(accelerator, model, optimizer, scheduler, x, y)
            progress.value += 1
            if saved:
                trained_after_save.set()  # the staged save may be written now
            if progress.value in save_at:
                saved.append(str(accelerator.save_state()))
                if return_at_save:
                    return {"saved": saved, "published_on_return": Path(saved[-1]).is_dir()}
            if progress.value >= total_steps:
                break
    trained_after_save.set()
    weights = {k: v.detach().clone() for k, v in accelerator.get_state_dict(model).items()}
    accelerator.end_training()
    history = async_save.saver().history
    records = [(Path(r.folder).name, r.blocked_s, r.total_s, r.staged_bytes) for r in history]
    return {"weights": weights, "saved": saved, "records": records, "alive": alive is not None}


def kill_during_write(
    project_dir: str, kill_rank: int, kill_index: int, steps: int = 6, how: str = "SIGKILL"
) -> None:
    """Async saves after steps 2 and 4; rank kill_rank is SIGKILLed from the writer thread just before
    its file number kill_index of the second save (the first one is complete by then: save_state
    waits for it); how="raise": that write fails with an OSError instead (a full disk).

    The second save is known by its folder, not by a count of the training thread's: the training
    thread reaches its second save_state while the first save's writer may not have begun (run Q2
    of 2026-12-06 killed the first save that way, on a loaded machine)."""
    import torch
    from torch import nn

    from notebook_launcher import Accelerator
    from notebook_launcher.runtime.checkpointing import async_save
    from notebook_launcher.utils import ProjectConfiguration, set_seed

    config = ProjectConfiguration(project_dir=project_dir, automatic_checkpoint_naming=True, async_save=True)
    accelerator = Accelerator(project_config=config)
    set_seed(0)
    model = nn.Linear(4, 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    model, optimizer = accelerator.prepare(model, optimizer)
    second_save = ".checkpoint_1.partial"  # checkpoint.folders(): where checkpoint_1 is written first

    def die(index: int, path: Path) -> None:
        if second_save in path.parts and index == kill_index and accelerator.process_index == kill_rank:
            if how == "raise":
                raise OSError(28, "No space left on device")
            os.kill(os.getpid(), signal.SIGKILL)

    async_save.saver().before_write = die
    for step in range(1, steps + 1):
        accelerator.backward(model(torch.randn(2, 4)).sum())
        optimizer.step()
        optimizer.zero_grad()
        if step in (2, 4):
            accelerator.save_state()
    accelerator.end_training()


def async_save_under_deepspeed(project_dir: str) -> str:
    """save_state(async_save=True) with a prepared DeepSpeed engine: the refusal's message."""
    import torch
    from torch import nn

    from notebook_launcher import Accelerator
    from notebook_launcher.errors import AcceleratorError

    accelerator = Accelerator(project_dir=project_dir)
    model = nn.Linear(4, 4)
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=0.01))
    try:
        accelerator.save_state(async_save=True)
    except AcceleratorError as exc:
        return str(exc)
    return "saved"


def save_by_minutes(
    project_dir: str, saves: int = 3, fast_clock_rank: int = 1, max_steps: int = 3000
) -> dict:
    """ProjectConfiguration(save_every_n_minutes=T) with T = 10 step times measured here first (a floor
    of this machine now, not an absolute time); rank fast_clock_rank's clock runs 3x fast, so a rank
    deciding by its own clock would save at other steps than rank 0 (and hang in save_state). Trains
    until `saves` periodic saves happened (every rank counts the same saves when they agree)."""
    import time

    import torch
    from torch import nn

    from notebook_launcher import Accelerator
    from notebook_launcher.utils import ProjectConfiguration, set_seed

    set_seed(0)
    model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    took = []
    for _ in range(7):  # the floor: one step of this model in this process, unprepared (faster than prepared)
        began = time.perf_counter()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
        took.append(time.perf_counter() - began)
    period = 10 * sorted(took)[len(took) // 2]
    config = ProjectConfiguration(project_dir=project_dir, save_every_n_minutes=period / 60)
    accelerator = Accelerator(project_config=config)
    data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=4, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    periodic = accelerator._periodic
    assert periodic is not None
    if accelerator.process_index == fast_clock_rank:
        periodic.clock = lambda: 3 * time.monotonic()
    steps = 0
    while config.iteration < saves and steps < max_steps:
        for xb, yb in loader:
            accelerator.backward(torch.nn.functional.mse_loss(model(xb), yb))
            optimizer.step()
            optimizer.zero_grad()
            steps += 1
            if config.iteration >= saves or steps >= max_steps:
                break
    accelerator.end_training()
    return {"saved": periodic.saved, "period": period, "steps": steps}


def agreement_without_a_peer(project_dir: str) -> str | None:
    """Rank 1's background write is held until rank 0 has heard that the save failed: rank 0's writer
    must give up the publish agreement at its bound (NOTEBOOK_LAUNCHER_CHECKPOINT_AGREE_SECONDS, set by
    the test) instead of waiting for good. Then rank 1 is let go and gives up the same way (rank 0 is
    no longer in the agreement). Each rank returns what its save_state failure said."""
    import threading

    import torch
    import torch.distributed as dist
    from torch import nn

    from notebook_launcher import Accelerator
    from notebook_launcher.errors import AcceleratorError
    from notebook_launcher.runtime.checkpointing import async_save
    from notebook_launcher.utils import ProjectConfiguration

    config = ProjectConfiguration(project_dir=project_dir, automatic_checkpoint_naming=True, async_save=True)
    accelerator = Accelerator(project_config=config)
    model = nn.Linear(4, 4)
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=0.01))
    release = threading.Event()
    rank = accelerator.process_index
    if rank == 1:
        async_save.saver().before_write = lambda index, path: release.wait()
    accelerator.save_state()
    said = None
    if rank == 0:
        try:
            async_save.saver().wait()
        except AcceleratorError as exc:
            said = str(exc)
    dist.barrier()  # the training's group: rank 0 has heard of the failure by now
    if rank == 1:
        release.set()
        try:
            async_save.saver().wait()
        except AcceleratorError as exc:
            said = str(exc)
    return said


def _digest(accelerator, model) -> str:
    import hashlib

    digest = hashlib.sha256()
    for key, tensor in sorted(accelerator.get_state_dict(model).items()):
        digest.update(key.encode() + tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def kill_cycles(project_dir: str, seed: int, cycles: int) -> list[dict]:
    """One attempt per restart (max_restarts=cycles): resume from the latest checkpoint and check it is
    the one the previous attempt saw published (folder, step, weights' digest), then save one
    checkpoint to completion (async, waited for), train on, and start another async save during whose
    background write a rank chosen from `seed` SIGKILLs itself once a fraction of its bytes chosen
    from `seed` is on disk (from the start of the write to its files written, before the ranks
    agree). The last attempt returns every attempt's check (rank 0 keeps them in a file)."""
    import json
    import random
    import threading

    import torch
    from torch import nn

    from notebook_launcher import Accelerator
    from notebook_launcher.runtime.checkpointing import async_save, naming
    from notebook_launcher.utils import ProjectConfiguration, set_seed

    folder = Path(project_dir)
    config = ProjectConfiguration(
        project_dir=project_dir, automatic_checkpoint_naming=True, total_limit=2, async_save=True
    )
    accelerator = Accelerator(project_config=config)
    attempt, rank = accelerator.restart_count, accelerator.process_index
    set_seed(attempt)
    model = nn.Sequential(nn.Linear(256, 4096), nn.ReLU(), nn.Linear(4096, 1))  # ~12 MB with AdamW's state
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = accelerator.prepare(model, optimizer)
    progress = SavedCount("step")
    accelerator.register_for_checkpointing(progress)
    ledger, checks = folder / "published.json", folder / "checks.json"

    def step() -> None:
        accelerator.backward(model(torch.randn(4, 256)).square().mean())
        optimizer.step()
        optimizer.zero_grad()
        progress.value += 1

    if attempt > 0:
        expected = json.loads(ledger.read_text())
        latest = naming.latest_checkpoint(project_dir).name
        accelerator.load_state()
        seen = {
            "attempt": attempt,
            "latest": latest,
            "step": progress.value,
            "digest": _digest(accelerator, model),
        }
        seen["killed"] = expected.pop("killed")
        seen["moment"] = json.loads((folder / f"moment_{attempt - 1}.json").read_text())
        seen["ok"] = all(seen[key] == value for key, value in expected.items())
        if rank == 0:
            done = json.loads(checks.read_text()) if checks.exists() else []
            checks.write_text(json.dumps([*done, seen]))
        if attempt == cycles:
            accelerator.end_training()
            return json.loads(checks.read_text()) if rank == 0 else []
    for _ in range(2):
        step()
    published = accelerator.save_state()
    async_save.saver().wait()  # published on every rank
    choice = random.Random(f"{seed}:{attempt}")  # the same on every rank
    victim, fraction = choice.randrange(accelerator.num_processes), choice.random()
    if rank == 0:
        state = {"latest": published.name, "step": progress.value, "digest": _digest(accelerator, model)}
        state["killed"] = {"rank": victim, "fraction": round(fraction, 3)}
        scratch = folder / "published.json.tmp"
        scratch.write_text(json.dumps(state))
        scratch.replace(ledger)
    accelerator.wait_for_everyone()
    for _ in range(2):
        step()  # the next save holds other weights
    saver = async_save.saver()
    if rank == victim:
        dying = threading.Lock()  # taken once, never given back: the watch and after_write may both come

        def die(where: str = "its files written, before the agreement") -> None:
            dying.acquire()
            written = saver.writing.bytes_on_disk() if saver.writing is not None else 0
            moment = {"where": where, "written": written, "staged": saver.history[-1].staged_bytes}
            scratch = folder / f"moment_{attempt}.json.tmp"
            scratch.write_text(json.dumps(moment))
            scratch.replace(folder / f"moment_{attempt}.json")
            os.kill(os.getpid(), signal.SIGKILL)

        def watch() -> None:  # kill once `fraction` of this rank's staged bytes is on disk
            writer = saver.writing
            target = fraction * max(1, saver.history[-1].staged_bytes)
            while writer is None or writer.bytes_on_disk() < target:
                threading.Event().wait(0.0005)  # a poll of the file sizes, not a synchronisation
                writer = saver.writing
            die("during the write")

        def start_watching(index: int, path: Path) -> None:
            if index == 0:
                threading.Thread(target=watch, daemon=True).start()

        saver.after_write = die  # its files all written before the watch saw the fraction: die now
        saver.before_write = start_watching
    accelerator.save_state()
    while True:  # until this rank dies, or its peer's death ends a collective (a secondary failure)
        step()
