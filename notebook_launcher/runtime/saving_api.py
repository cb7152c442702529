"""The Accelerator's model-saving and checkpoint methods (Accelerate's names), kept apart so
accelerator.py stays about preparing and training. Everything here delegates to the strategy
(which knows how its models are wrapped or sharded) and to checkpoint.py.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import AcceleratorError
from . import checkpoint
from .precision import Precision
from .safe_files import save_safetensors
from .state import reset_state, teardown_on_end


class SavingAPI:
    """Mixin: needs self.strategy, self.precision, self._models/_optimizers/... and ProcessAPI."""

    def unwrap_model(self, model: nn.Module, keep_fp32_wrapper: bool = True) -> nn.Module:
        inner = self.strategy.unwrap_model(model)
        if not keep_fp32_wrapper:
            Precision.unwrap_forward(inner)
        return inner

    def get_state_dict(self, model: nn.Module, unwrap: bool = True) -> dict[str, torch.Tensor]:
        return self.strategy.model_state_dict(model)

    def save(self, obj: Any, f: str | os.PathLike[str], safe_serialization: bool = False) -> None:
        """torch.save on the main process only (atomic: write then rename); with safe_serialization,
        a safetensors file instead (a dict of tensors only, loadable without unpickling)."""
        if self.is_main_process:
            path = Path(f)
            tmp = path.with_name(f".{path.name}.tmp")
            if safe_serialization:
                save_safetensors(obj, tmp)
            else:
                torch.save(obj, tmp)
            os.replace(tmp, path)

    def save_model(
        self,
        model: nn.Module,
        save_directory: str | os.PathLike[str],
        safe_serialization: bool = False,
        **_: Any,
    ) -> Path:
        """Save the full (unwrapped, unsharded) weights as pytorch_model.bin in save_directory, or as
        model.safetensors with safe_serialization=True (Accelerate's default is True; ours stays .bin)."""
        state = self.get_state_dict(model)
        folder = Path(save_directory)
        name = "model.safetensors" if safe_serialization else "pytorch_model.bin"
        if self.is_main_process:
            folder.mkdir(parents=True, exist_ok=True)
            self.save(state, folder / name, safe_serialization=safe_serialization)
        self.wait_for_everyone()
        return folder / name

    def register_for_checkpointing(self, *objects: Any) -> None:
        """Include objects with state_dict()/load_state_dict() in save_state and load_state."""
        for obj in objects:
            if not (hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict")):
                raise AcceleratorError(
                    f"{type(obj).__name__} cannot be checkpointed: it needs state_dict() and load_state_dict()."
                )
        self._custom_objects.extend(objects)

    def save_state(self, output_dir: str | os.PathLike[str] | None = None, **_: Any) -> Path:
        """Save models, optimizers, schedulers, scaler, RNG, loader positions and registered objects."""
        if output_dir is None:
            output_dir = self._auto_checkpoint_dir(self.save_iteration)
        path = checkpoint.save_state(self._training_objects(), self._ranks(), output_dir)
        self.save_iteration += 1
        return path

    def load_state(self, input_dir: str | os.PathLike[str] | None = None, **_: Any) -> None:
        if input_dir is None:
            existing = sorted(
                Path(self._auto_checkpoint_dir(0)).parent.glob("checkpoint_*"), key=_ckpt_number
            )
            if not existing:
                raise AcceleratorError(f"No checkpoint found under {self.project_dir}/checkpoints.")
            input_dir = existing[-1]
            self.save_iteration = _ckpt_number(input_dir) + 1
        checkpoint.load_state(self._training_objects(), self._ranks(), input_dir)
        self._continue_tracker_runs(input_dir)

    def _training_objects(self) -> checkpoint.TrainingObjects:
        return checkpoint.TrainingObjects(
            strategy=self.strategy,
            models=self._models,
            optimizers=self._optimizers,
            schedulers=self._schedulers,
            dataloaders=self._dataloaders,
            custom_objects=self._custom_objects,
            scaler=self.precision.scaler,
            tracker_runs=self._tracker_runs(),
        )

    def _ranks(self) -> checkpoint.Ranks:
        return checkpoint.Ranks(self.process_index, self.is_main_process, self.wait_for_everyone)

    def _auto_checkpoint_dir(self, iteration: int) -> Path:
        if self.project_dir is None:
            raise AcceleratorError(
                "save_state()/load_state() without a folder need Accelerator(project_dir=...)."
            )
        return Path(self.project_dir) / "checkpoints" / f"checkpoint_{iteration}"

    def free_memory(self, *objects: Any) -> list[None]:
        """Drop references to prepared objects and release cached memory."""
        for bucket in (
            self._models,
            self._optimizers,
            self._schedulers,
            self._dataloaders,
            self._custom_objects,
        ):
            bucket.clear()
        self._prepared_ids.clear()
        gc.collect()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.empty_cache()
        return [None] * len(objects)

    clear = free_memory

    def end_training(self) -> None:
        """Wait for every process, then tear down the process group (as Accelerate does) and forget
        this run's state, so a new Accelerator starts fresh.

        Inside notebook_launch's workers the group is kept until the worker exits: destroying a gloo
        group while a DDP model still referenced it made the model's destructor hang when the
        training function returned (seen intermittently), and the worker exits without teardown.
        """
        self.wait_for_everyone()
        reset_state(destroy_process_group=teardown_on_end())


def _ckpt_number(path: Path) -> int:
    tail = Path(path).name.rsplit("_", 1)[-1]
    return int(tail) if tail.isdigit() else -1
