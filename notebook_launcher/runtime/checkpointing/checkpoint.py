"""save_state / load_state: everything a run needs to continue exactly, in Accelerate's file layout,
written atomically.

A checkpoint folder holds what Accelerate's save_state writes: `model.safetensors` (or
`pytorch_model.bin`; `model_1.safetensors`... for more models), `optimizer.bin`, `scheduler.bin`,
`scaler.pt`, `custom_checkpoint_{i}.pkl` and `random_states_{rank}.pkl` (torch.save of Accelerate's
keys), so either library can load the other's checkpoints. We add the prepared loaders' positions
inside random_states (Accelerate ignores the extra key), and trackers.json (which tracker runs were
open, only when there were any) so a resumed run continues them. FSDP and DeepSpeed strategies write their
own model/optimizer files. Everything is written into a hidden sibling folder and renamed into
place once every rank has finished, so a crash never leaves a half-written checkpoint.

Everything but the registered custom objects is loaded with `torch.load(weights_only=True)`
(tensors and plain data only, NumPy's random state allowed, as Accelerate loads them), so a
tampered checkpoint cannot run code on load; custom objects' state is whatever their
state_dict() returns, so it stays a pickle: load only checkpoints you wrote.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ...errors import AcceleratorError
from .model_files import SAFE_WEIGHTS_NAME, WEIGHTS_NAME, load_weights_file, match_keys
from .writers import FileWriter, ImmediateWriter

SCALER_NAME = "scaler.pt"
TRACKERS_NAME = "trackers.json"
LOADERS_KEY = "notebook_launcher_dataloaders"


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
    step: int = 0
    save_hooks: list = field(default_factory=list)
    load_hooks: list = field(default_factory=list)
    tracker_runs: dict = field(default_factory=dict)  # tracker name -> its run_state()


@dataclass
class Ranks:
    """This process's place in the run: who writes, and how to wait for everyone."""

    index: int
    is_main: bool
    wait_for_everyone: Callable[[], None]


def numbered(name: str, index: int) -> str:
    """Accelerate's naming: the first object plain, the next ones with _1, _2 before the suffix."""
    stem, dot, ext = name.partition(".")
    return name if index == 0 else f"{stem}_{index}{dot}{ext}"


def rng_state(step: int = 0) -> dict[str, Any]:
    """This process's random state under Accelerate's random_states keys."""
    state: dict[str, Any] = {
        "step": step,
        "random_state": random.getstate(),
        "torch_manual_seed": torch.get_rng_state(),
    }
    try:
        import numpy

        state["numpy_random_seed"] = numpy.random.get_state()
    except ImportError:
        pass
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["torch_cuda_manual_seed"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    legacy = "python" in state  # checkpoints written before the Accelerate layout
    random.setstate(state["python" if legacy else "random_state"])
    torch.set_rng_state(state["torch" if legacy else "torch_manual_seed"])
    numpy_key = "numpy" if legacy else "numpy_random_seed"
    if numpy_key in state:
        import numpy

        numpy.random.set_state(state[numpy_key])
    cuda_key = "cuda" if legacy else "torch_cuda_manual_seed"
    if cuda_key in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state[cuda_key])


def save_state(
    objects: TrainingObjects,
    ranks: Ranks,
    output_dir: str | os.PathLike[str],
    *,
    safe_serialization: bool = True,
    staging: Path | None = None,
) -> Path:
    """Write the full training state of every rank into output_dir (atomically).

    The half-written folder lives in `staging` (default: beside output_dir); automatic naming keeps it
    out of the checkpoints folder, which then only ever holds complete checkpoints (a resume that
    checks `os.listdir(checkpoints)` is not misled by a save a killed rank left unfinished).
    """
    final, partial = folders(output_dir, staging)
    begin(partial, ranks)
    write_state_files(objects, ranks, partial, ImmediateWriter(), safe_serialization)
    ranks.wait_for_everyone()
    if ranks.is_main:
        publish(partial, final)
    ranks.wait_for_everyone()
    return final


def folders(output_dir: str | os.PathLike[str], staging: Path | None) -> tuple[Path, Path]:
    """The checkpoint folder and the hidden sibling it is written into before it is renamed."""
    final = Path(output_dir).expanduser().resolve()
    partial = Path(staging or final.parent).expanduser().resolve() / f".{final.name}.partial"
    return final, partial


def begin(partial: Path, ranks: Ranks) -> None:
    """A fresh hidden folder (a killed save's leftovers removed), seen by every rank on return."""
    if ranks.is_main:
        if partial.exists():
            shutil.rmtree(partial)
        partial.mkdir(parents=True)
    ranks.wait_for_everyone()


def write_state_files(
    objects: TrainingObjects, ranks: Ranks, partial: Path, writer: FileWriter, safe_serialization: bool
) -> None:
    """This rank's files, through writer: at once, or staged for the background thread. The
    state-dict collectives (an FSDP gather) run here, on the calling thread, in every rank's order."""
    strategy = objects.strategy
    default_files = strategy.uses_default_checkpoint_files
    # As Accelerate: the hooks see the user's modules (inside DDP) and their state dicts, keyed
    # without the wrapper's `module.` prefix; sharded strategies save their own way.
    models = [strategy.unwrap_model(m) for m in objects.models] if default_files else list(objects.models)
    weights = [strategy.model_state_dict(model) for model in objects.models] if default_files else []
    for hook in objects.save_hooks:
        hook(models, weights, str(partial))
    if default_files:
        opt_states = [
            strategy.optimizer_state_dict(o, objects.models[0] if objects.models else None)
            for o in objects.optimizers
        ]
        if ranks.is_main:
            _write_full_model_files(partial, weights, opt_states, safe_serialization, writer)
    else:
        strategy.save_training_state(partial, objects.models, objects.optimizers, writer=writer)
    if ranks.is_main:
        for i, scheduler in enumerate(objects.schedulers):
            writer.torch_save(scheduler.state_dict(), partial / numbered("scheduler.bin", i))
        if objects.scaler is not None:
            writer.torch_save(objects.scaler.state_dict(), partial / SCALER_NAME)
        for i, obj in enumerate(objects.custom_objects):
            writer.torch_save(obj.state_dict(), partial / f"custom_checkpoint_{i}.pkl")
        if objects.tracker_runs:
            writer.text(partial / TRACKERS_NAME, json.dumps(objects.tracker_runs, indent=1))
    states = rng_state(objects.step)
    states[LOADERS_KEY] = [loader.state_dict() for loader in objects.dataloaders]
    writer.torch_save(states, partial / f"random_states_{ranks.index}.pkl")


def _write_full_model_files(
    folder: Path, weights: list, opt_states: list, safe_serialization: bool, writer: FileWriter
) -> None:
    for i, state in enumerate(weights):
        if safe_serialization:
            from .model_files import without_shared_tensors

            writer.safetensors_save(
                without_shared_tensors(state), folder / numbered(SAFE_WEIGHTS_NAME, i), {"format": "pt"}
            )
        else:
            writer.torch_save(state, folder / numbered(WEIGHTS_NAME, i))
    for i, state in enumerate(opt_states):
        writer.torch_save(state, folder / numbered("optimizer.bin", i))


def publish(partial: Path, final: Path) -> None:
    """Rename the complete hidden folder into place (the main process, once every rank is done)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    _swap_into_place(partial, final)


def _swap_into_place(partial: Path, final: Path) -> None:
    old = final.parent / f".{final.name}.old"
    if old.exists():
        shutil.rmtree(old)
    if final.exists():
        os.replace(final, old)
    os.replace(partial, final)
    if old.exists():
        shutil.rmtree(old)


def load_state(objects: TrainingObjects, ranks: Ranks, input_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Restore what save_state wrote (ours or Accelerate's); returns {"step": ...} for the Accelerator."""
    folder = Path(input_dir).expanduser().resolve()
    if not folder.is_dir():
        raise AcceleratorError(
            f"Checkpoint folder {str(folder)!r} does not exist; pass the folder save_state wrote."
        )
    strategy = objects.strategy
    default_files = strategy.uses_default_checkpoint_files
    models = [strategy.unwrap_model(m) for m in objects.models] if default_files else list(objects.models)
    for hook in objects.load_hooks:
        hook(models, str(folder))
    if default_files:
        _load_full_model_files(folder, models, objects)
    else:
        strategy.load_training_state(folder, objects.models, objects.optimizers)
    for i, scheduler in enumerate(objects.schedulers):
        scheduler.load_state_dict(
            torch.load(_first(folder, numbered("scheduler.bin", i), f"scheduler_{i}.bin"), weights_only=True)
        )
    if objects.scaler is not None and (folder / SCALER_NAME).exists():
        objects.scaler.load_state_dict(torch.load(folder / SCALER_NAME, weights_only=True))
    _load_custom_objects(folder, objects.custom_objects)
    overrides: dict[str, Any] = {}
    rng_file = folder / f"random_states_{ranks.index}.pkl"
    if rng_file.exists():
        states = _load_random_states(rng_file)
        restore_rng_state(states)
        overrides["step"] = int(states.get("step", 0))
        for loader, position in zip(objects.dataloaders, states.get(LOADERS_KEY, []), strict=False):
            loader.load_state_dict(position)
    ranks.wait_for_everyone()
    return overrides


def read_tracker_runs(folder: Path) -> dict[str, dict]:
    """The tracker runs a checkpoint saved ({} for one saved without trackers)."""
    path = Path(folder).expanduser() / TRACKERS_NAME
    return json.loads(path.read_text()) if path.exists() else {}


def _load_full_model_files(folder: Path, models: list, objects: TrainingObjects) -> None:
    strategy = objects.strategy
    for i, model in enumerate(models):
        path = _first(folder, numbered(SAFE_WEIGHTS_NAME, i), numbered(WEIGHTS_NAME, i), f"model_{i}.bin")
        expected = set(strategy.unwrap_model(model).state_dict())
        strategy.load_model_state_dict(model, match_keys(load_weights_file(path), expected))
    first_model = objects.models[0] if objects.models else None
    for i, optimizer in enumerate(objects.optimizers):
        path = _first(folder, numbered("optimizer.bin", i), f"optimizer_{i}.bin")
        state = torch.load(path, map_location="cpu", weights_only=True)
        strategy.load_optimizer_state_dict(optimizer, first_model, state)


def _load_custom_objects(folder: Path, custom_objects: list) -> None:
    found = [p for p in folder.iterdir() if re.fullmatch(r"custom_checkpoint_\d+\.pkl", p.name)]
    if len(found) != len(custom_objects):
        raise AcceleratorError(
            f"{str(folder)!r} holds {len(found)} custom checkpoint(s) but {len(custom_objects)} object(s) are "
            "registered with register_for_checkpointing; register the same objects, in the same order, as when "
            "the checkpoint was saved."
        )
    for i, obj in enumerate(custom_objects):
        obj.load_state_dict(_load_pickle_or_torch(folder / f"custom_checkpoint_{i}.pkl"))


def _load_random_states(path: Path) -> dict[str, Any]:
    """A random_states file, as Accelerate loads it: weights_only, with NumPy's random state (an
    array of its own dtype) allowed. A plain pickle from a pre-release version is refused rather
    than unpickled: it could run code."""
    try:
        with torch.serialization.safe_globals(_numpy_state_globals()):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise AcceleratorError(
            f"{str(path)!r} holds more than random states ({exc}); it is not loaded, because unpickling it could "
            "run code. Load only checkpoints you wrote; to resume without the random states, delete the file."
        ) from None
    except RuntimeError as exc:  # not a torch file: a plain pickle written before the Accelerate layout
        raise AcceleratorError(
            f"{str(path)!r} was written by a pre-release version as a plain pickle, which load_state no longer "
            f"unpickles ({exc}); delete it to resume without the random states."
        ) from None


def _numpy_state_globals() -> list[Any]:
    try:
        import numpy
    except ImportError:
        return []
    core = getattr(numpy, "_core", None) or numpy.core  # numpy 2 renamed it
    allowed = [core.multiarray._reconstruct, numpy.ndarray, numpy.dtype]
    allowed += [type(numpy.dtype(numpy.uint32))]  # numpy >= 1.25 pickles the dtype's own class
    import codecs

    return [*allowed, codecs.encode]


def _load_pickle_or_torch(path: Path) -> Any:
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except (pickle.UnpicklingError, RuntimeError):  # written with pickle.dump by earlier versions
        with open(path, "rb") as fp:
            return pickle.load(fp)


def _first(folder: Path, *names: str) -> Path:
    for name in names:
        if (folder / name).exists():
            return folder / name
    raise AcceleratorError(
        f"Checkpoint folder {str(folder)!r} has none of {', '.join(names)}; is it a save_state folder?"
    )
