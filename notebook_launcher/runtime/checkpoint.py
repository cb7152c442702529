"""save_state / load_state: everything a run needs to continue exactly, written atomically.

A checkpoint is a folder: model_{i}.bin, optimizer_{i}.bin, scheduler_{i}.bin, scaler.pt,
dataloader_{i}.json, custom_checkpoint_{i}.pkl, random_states_{rank}.pkl, and trackers.json (which
tracker runs were open, when there were any) so a resumed run continues them. It is written into a
hidden sibling folder and renamed into place only when every rank has finished, so a crash never
leaves a half-written checkpoint under the real name.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..errors import AcceleratorError

_SCALER = "scaler.pt"
_TRACKERS = "trackers.json"


@dataclass
class TrainingObjects:
    """What a checkpoint holds, handed over by the Accelerator (which owns these lists)."""

    strategy: Any
    models: list = field(default_factory=list)
    optimizers: list = field(default_factory=list)
    schedulers: list = field(default_factory=list)
    dataloaders: list = field(default_factory=list)
    custom_objects: list = field(default_factory=list)
    scaler: Any = None
    tracker_runs: dict = field(default_factory=dict)  # tracker name -> its run_state()


@dataclass
class Ranks:
    """This process's place in the run: who writes, and how to wait for everyone."""

    index: int
    is_main: bool
    wait_for_everyone: Callable[[], None]


def _name(stem: str, index: int, ext: str) -> str:
    return f"{stem}_{index}.{ext}"


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    try:
        import numpy

        state["numpy"] = numpy.random.get_state()
    except ImportError:
        pass
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "numpy" in state:
        import numpy

        numpy.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_state(objects: TrainingObjects, ranks: Ranks, output_dir: str | os.PathLike[str]) -> Path:
    """Write the full training state of every rank into output_dir (atomically)."""
    final = Path(output_dir).expanduser().resolve()
    partial = final.parent / f".{final.name}.partial"
    if ranks.is_main:
        if partial.exists():
            shutil.rmtree(partial)
        partial.mkdir(parents=True)
    ranks.wait_for_everyone()
    strategy = objects.strategy
    strategy.save_training_state(partial, objects.models, objects.optimizers)
    if ranks.is_main:
        for i, scheduler in enumerate(objects.schedulers):
            torch.save(scheduler.state_dict(), partial / _name("scheduler", i, "bin"))
        if objects.scaler is not None:
            torch.save(objects.scaler.state_dict(), partial / _SCALER)
        for i, obj in enumerate(objects.custom_objects):
            with open(partial / _name("custom_checkpoint", i, "pkl"), "wb") as f:
                pickle.dump(obj.state_dict(), f)
        if objects.tracker_runs:
            (partial / _TRACKERS).write_text(json.dumps(objects.tracker_runs, indent=1))
    for i, loader in enumerate(objects.dataloaders):
        if ranks.is_main or strategy.saves_on_every_rank:
            (partial / _name("dataloader", i, "json")).write_text(json.dumps(loader.state_dict()))
    with open(partial / f"random_states_{ranks.index}.pkl", "wb") as f:
        pickle.dump(rng_state(), f)
    ranks.wait_for_everyone()
    if ranks.is_main:
        _swap_into_place(partial, final)
    ranks.wait_for_everyone()
    return final


def _swap_into_place(partial: Path, final: Path) -> None:
    old = final.parent / f".{final.name}.old"
    if old.exists():
        shutil.rmtree(old)
    if final.exists():
        os.replace(final, old)
    os.replace(partial, final)
    if old.exists():
        shutil.rmtree(old)


def load_state(objects: TrainingObjects, ranks: Ranks, input_dir: str | os.PathLike[str]) -> None:
    """Restore what save_state wrote: weights, optimizers, schedulers, scaler, loaders, RNG, objects."""
    folder = Path(input_dir).expanduser().resolve()
    if not folder.is_dir():
        raise AcceleratorError(
            f"Checkpoint folder {str(folder)!r} does not exist; pass the folder save_state wrote."
        )
    objects.strategy.load_training_state(folder, objects.models, objects.optimizers)
    for i, scheduler in enumerate(objects.schedulers):
        scheduler.load_state_dict(torch.load(folder / _name("scheduler", i, "bin"), weights_only=False))
    if objects.scaler is not None and (folder / _SCALER).exists():
        objects.scaler.load_state_dict(torch.load(folder / _SCALER, weights_only=False))
    for i, loader in enumerate(objects.dataloaders):
        path = folder / _name("dataloader", i, "json")
        if path.exists():
            loader.load_state_dict(json.loads(path.read_text()))
    for i, obj in enumerate(objects.custom_objects):
        with open(folder / _name("custom_checkpoint", i, "pkl"), "rb") as f:
            obj.load_state_dict(pickle.load(f))
    rng_file = folder / f"random_states_{ranks.index}.pkl"
    if rng_file.exists():
        with open(rng_file, "rb") as f:
            restore_rng_state(pickle.load(f))
    ranks.wait_for_everyone()


def read_tracker_runs(folder: Path) -> dict[str, dict]:
    """The tracker runs a checkpoint saved ({} for one saved without trackers)."""
    path = Path(folder).expanduser() / _TRACKERS
    return json.loads(path.read_text()) if path.exists() else {}


def save_full_model_files(folder: Path, models: list, optimizers: list, strategy: Any, is_main: bool) -> None:
    """Default layout: the main rank writes full state dicts of every model and optimizer."""
    states = [strategy.model_state_dict(m) for m in models]
    opt_states = [strategy.optimizer_state_dict(o, models[0] if models else None) for o in optimizers]
    if is_main:
        for i, state in enumerate(states):
            torch.save(state, folder / _name("model", i, "bin"))
        for i, state in enumerate(opt_states):
            torch.save(state, folder / _name("optimizer", i, "bin"))


def load_full_model_files(folder: Path, models: list, optimizers: list, strategy: Any) -> None:
    for i, model in enumerate(models):
        state = torch.load(folder / _name("model", i, "bin"), map_location="cpu", weights_only=True)
        strategy.load_model_state_dict(model, state)
    for i, optimizer in enumerate(optimizers):
        state = torch.load(folder / _name("optimizer", i, "bin"), map_location="cpu", weights_only=False)
        strategy.load_optimizer_state_dict(optimizer, models[0] if models else None, state)
