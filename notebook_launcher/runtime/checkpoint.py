"""save_state / load_state: everything a run needs to continue exactly, written atomically.

A checkpoint is a folder: model_{i}.bin, optimizer_{i}.bin, scheduler_{i}.bin, scaler.pt,
dataloader_{i}.json, custom_checkpoint_{i}.pkl and random_states_{rank}.pkl. It is written into a
hidden sibling folder and renamed into place only when every rank has finished, so a crash never
leaves a half-written checkpoint under the real name.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..errors import AcceleratorError

if TYPE_CHECKING:
    from .accelerator import Accelerator

_SCALER = "scaler.pt"


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


def save_state(acc: Accelerator, output_dir: str | os.PathLike[str]) -> Path:
    """Write the full training state of every rank into output_dir (atomically)."""
    final = Path(output_dir).expanduser().resolve()
    partial = final.parent / f".{final.name}.partial"
    if acc.is_main_process:
        if partial.exists():
            shutil.rmtree(partial)
        partial.mkdir(parents=True)
    acc.wait_for_everyone()
    acc.strategy.save_training_state(partial, acc._models, acc._optimizers)
    if acc.is_main_process:
        for i, scheduler in enumerate(acc._schedulers):
            torch.save(scheduler.state_dict(), partial / _name("scheduler", i, "bin"))
        if acc.precision.scaler is not None:
            torch.save(acc.precision.scaler.state_dict(), partial / _SCALER)
        for i, obj in enumerate(acc._custom_objects):
            with open(partial / _name("custom_checkpoint", i, "pkl"), "wb") as f:
                pickle.dump(obj.state_dict(), f)
    for i, loader in enumerate(acc._dataloaders):
        if acc.is_main_process or acc.strategy.saves_on_every_rank:
            (partial / _name("dataloader", i, "json")).write_text(json.dumps(loader.state_dict()))
    with open(partial / f"random_states_{acc.process_index}.pkl", "wb") as f:
        pickle.dump(rng_state(), f)
    acc.wait_for_everyone()
    if acc.is_main_process:
        _swap_into_place(partial, final)
    acc.wait_for_everyone()
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


def load_state(acc: Accelerator, input_dir: str | os.PathLike[str]) -> None:
    """Restore what save_state wrote: weights, optimizers, schedulers, scaler, loaders, RNG, objects."""
    folder = Path(input_dir).expanduser().resolve()
    if not folder.is_dir():
        raise AcceleratorError(
            f"Checkpoint folder {str(folder)!r} does not exist; pass the folder save_state wrote."
        )
    acc.strategy.load_training_state(folder, acc._models, acc._optimizers)
    for i, scheduler in enumerate(acc._schedulers):
        scheduler.load_state_dict(torch.load(folder / _name("scheduler", i, "bin"), weights_only=False))
    if acc.precision.scaler is not None and (folder / _SCALER).exists():
        acc.precision.scaler.load_state_dict(torch.load(folder / _SCALER, weights_only=False))
    for i, loader in enumerate(acc._dataloaders):
        path = folder / _name("dataloader", i, "json")
        if path.exists():
            loader.load_state_dict(json.loads(path.read_text()))
    for i, obj in enumerate(acc._custom_objects):
        with open(folder / _name("custom_checkpoint", i, "pkl"), "rb") as f:
            obj.load_state_dict(pickle.load(f))
    rng_file = folder / f"random_states_{acc.process_index}.pkl"
    if rng_file.exists():
        with open(rng_file, "rb") as f:
            restore_rng_state(pickle.load(f))
    acc.wait_for_everyone()


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
