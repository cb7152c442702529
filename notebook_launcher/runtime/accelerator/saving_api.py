"""The Accelerator's model-saving and checkpoint methods (Accelerate's names), kept apart so
facade.py stays about preparing and training. Everything here delegates to the strategy
(which knows how its models are wrapped or sharded) and to checkpoint.py.
"""

from __future__ import annotations

import gc
import os
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from ...errors import AcceleratorError, AcceleratorValueError
from .. import memory_phases, telemetry
from ..checkpointing import async_save as async_save_module
from ..checkpointing import checkpoint, model_files, naming
from ..checkpointing.periodic import PeriodicSaves, rank_zero_decides
from ..checkpointing.safe_files import save_safetensors
from ..checkpointing.writers import StagedWriter
from ..precision.mixed import Precision
from ..world.state import reset_state, teardown_on_end

if TYPE_CHECKING:
    from ..data import DataLoaderShard
    from ..strategies import Strategy
    from ..wrappers import AcceleratedOptimizer, AcceleratedScheduler
    from .configurations import ProjectConfiguration


class SavingAPI:
    """Mixin: needs self.strategy, self.precision, self._models/_optimizers/..., the state hooks,
    self.project_configuration and ProcessAPI."""

    save_iteration: int  # the next automatic checkpoint's number
    _periodic: PeriodicSaves | None  # ProjectConfiguration.save_every_n_steps's counter, once made
    # declared only: the Accelerator sets them, and its other mixins define the methods below
    step: int
    strategy: Strategy
    precision: Precision
    project_configuration: ProjectConfiguration
    _models: list[nn.Module]
    _optimizers: list[AcceleratedOptimizer]
    _schedulers: list[AcceleratedScheduler]
    _dataloaders: list[DataLoaderShard]
    _custom_objects: list[Any]
    _prepared_ids: set[int]
    _save_model_state_pre_hook: OrderedDict[int, Any]
    _load_model_state_pre_hook: OrderedDict[int, Any]

    if TYPE_CHECKING:

        @property
        def is_main_process(self) -> bool: ...
        @property
        def process_index(self) -> int: ...
        def wait_for_everyone(self) -> None: ...
        @property
        def project_dir(self) -> str | None: ...
        @property
        def device(self) -> torch.device: ...
        def _tracker_runs(self) -> dict[str, dict]: ...
        def _continue_tracker_runs(self, checkpoint_dir: str | os.PathLike[str]) -> None: ...

    def unwrap_model(self, model: nn.Module, keep_fp32_wrapper: bool = True) -> nn.Module:
        inner = self.strategy.unwrap_model(model)
        if not keep_fp32_wrapper:
            Precision.unwrap_forward(inner)
        return inner

    def get_state_dict(self, model: nn.Module, unwrap: bool = True) -> dict[str, torch.Tensor]:
        """The model's full state dict (gathered when sharded); unwrap=False keeps the wrapper's
        key prefixes (DDP's `module.`) for a model that is not sharded."""
        if not unwrap and self.strategy.uses_default_checkpoint_files:
            return model.state_dict()
        return self.strategy.model_state_dict(model)

    def save(self, obj: Any, f: str | os.PathLike[str], safe_serialization: bool = False) -> None:
        """torch.save (or safetensors) on the main process only (atomic: write then rename)."""
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
        max_shard_size: int | str = "10GB",
        safe_serialization: bool = True,
    ) -> Path:
        """Save the full (unwrapped, gathered) weights in HuggingFace's layout: `model.safetensors`, or
        `pytorch_model.bin` with safe_serialization=False; shards plus an index json above
        max_shard_size. Returns the weights file (the index when sharded); Accelerate returns None."""
        folder = Path(save_directory)
        if folder.is_file():
            raise AcceleratorError(f"save_model needs a directory; {str(folder)!r} is a file.")
        state = self.get_state_dict(model)
        written: list[Path] = []
        if self.is_main_process:
            written = model_files.write_model_files(
                state, folder, max_shard_size=max_shard_size, safe_serialization=safe_serialization
            )
        self.wait_for_everyone()
        default = folder / (model_files.SAFE_WEIGHTS_NAME if safe_serialization else model_files.WEIGHTS_NAME)
        return written[-1] if written else default

    def register_for_checkpointing(self, *objects: Any) -> None:
        """Include objects with state_dict()/load_state_dict() in save_state and load_state. Every object
        that lacks them is named, by its position, in one ValueError (Accelerate's wording)."""
        invalid = [
            f"Item at index {index}, {type(obj).__name__}"
            for index, obj in enumerate(objects)
            if not (hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict"))
        ]
        if invalid:
            raise AcceleratorValueError(
                "register_for_checkpointing: every object needs state_dict() and load_state_dict() to be "
                f"saved and loaded; these have not: {'; '.join(invalid)}. Register the model, optimizer "
                "or an object of yours that defines both."
            )
        self._custom_objects.extend(objects)

    def register_save_state_pre_hook(self, hook: Callable[..., None]) -> RemovableHandle:
        """hook(models, weights, output_dir) runs in save_state before the files are written; it may save
        more files into output_dir (the folder being written) or remove entries from weights (the state
        dicts about to be saved) to save those models its own way. Returns a handle with .remove()."""
        handle = RemovableHandle(self._save_model_state_pre_hook)
        self._save_model_state_pre_hook[handle.id] = hook
        return handle

    def register_load_state_pre_hook(self, hook: Callable[..., None]) -> RemovableHandle:
        """hook(models, input_dir) runs in load_state before the weights are loaded; removing a model from
        the list skips loading it (the hook loaded it). Returns a handle with .remove()."""
        handle = RemovableHandle(self._load_model_state_pre_hook)
        self._load_model_state_pre_hook[handle.id] = hook
        return handle

    def save_state(
        self,
        output_dir: str | os.PathLike[str] | None = None,
        safe_serialization: bool = True,
        async_save: bool | None = None,
        **_: Any,
    ) -> Path:
        """Save models, optimizers, schedulers, scaler, RNG, loader positions and registered objects.

        With ProjectConfiguration(automatic_checkpoint_naming=True) (or no output_dir and a project_dir)
        the folder is `{project_dir}/checkpoints/checkpoint_{save_iteration}` and at most total_limit
        checkpoints are kept, the oldest deleted once the new one is complete.

        async_save=True (default: ProjectConfiguration.async_save) returns once the state is copied to
        host memory; a background thread writes the files and renames the folder into place only when
        every rank's files are complete (checkpointing/async_save.py). The returned path is where the
        folder appears once published; a later save_state, load_state or end_training waits for that.
        """
        started = time.perf_counter()
        project = self.project_configuration
        use_async = project.async_save if async_save is None else async_save
        if use_async and not self.strategy.supports_async_save:
            raise AcceleratorError(
                f"save_state(async_save=True) is not supported with {type(self.strategy).__name__}: DeepSpeed's "
                "engine writes its checkpoint itself (save_checkpoint, with collectives on its partitions), with "
                "no step that copies the state to host memory for a background write. Use save_state() "
                "(async_save=False, or ProjectConfiguration(async_save=False))."
            )
        async_save_module.finish_pending()  # a second save waits for the first
        automatic = project.automatic_checkpoint_naming or output_dir is None
        if automatic:
            output_dir = naming.new_checkpoint_dir(self.project_dir, self.save_iteration)
        target = cast("str | os.PathLike[str]", output_dir)  # automatic when it was None
        staging = Path(cast(str, self.project_dir)) if automatic else None  # set: new_checkpoint_dir checked
        if use_async:
            path = self._save_state_in_background(target, staging, automatic, safe_serialization, started)
        else:
            self.wait_for_everyone()
            path = checkpoint.save_state(
                self._training_objects(),
                self._ranks(),
                target,
                safe_serialization=safe_serialization,
                staging=staging,
            )
            if automatic and self.is_main_process:
                naming.rotate(path.parent, project.total_limit, keep=path)
            self.wait_for_everyone()
            if self.is_main_process:  # the launcher names it on a restart or preemption (result.checkpoints)
                seconds = time.perf_counter() - started
                telemetry.emit(
                    "checkpoint",
                    path=str(path),
                    step=self.step,
                    blocked_s=seconds,
                    total_s=seconds,
                    background=False,
                )
        project.iteration += 1
        memory_phases.phase_ended()  # the state dicts and file buffers are garbage now
        return path

    def _save_state_in_background(
        self,
        output_dir: str | os.PathLike[str],
        staging: Path | None,
        automatic: bool,
        safe_serialization: bool,
        started: float,
    ) -> Path:
        """Stage on this thread, write and publish on the saver's (checkpointing/async_save.py).
        The record's blocked time runs from the save_state call (waiting for the previous save too)."""
        saver = async_save_module.saver()
        writer = StagedWriter(saver.buffers, saver.group())
        final, partial = checkpoint.folders(output_dir, staging)
        ranks = self._ranks()
        checkpoint.begin(partial, ranks)
        saver.buffers.reset_count()
        checkpoint.write_state_files(self._training_objects(), ranks, partial, writer, safe_serialization)
        record = async_save_module.CheckpointRecord(
            step=self.step,
            folder=str(final),
            blocked_s=time.perf_counter() - started,
            staged_bytes=saver.buffers.copied_bytes,
            rank=ranks.index,
        )
        is_main, total_limit = ranks.is_main, self.project_configuration.total_limit

        def publish() -> None:  # on the saver's thread, once every rank's files are complete
            if not is_main:
                return
            checkpoint.publish(partial, final)
            if automatic:
                naming.rotate(final.parent, total_limit, keep=final)
            telemetry.emit(
                "checkpoint",
                path=str(final),
                step=record.step,
                blocked_s=record.blocked_s,
                total_s=time.perf_counter() - started,  # from the save_state call to the folder published
                background=True,
            )

        saver.submit(writer, record, started, publish)
        return final

    def load_state(self, input_dir: str | os.PathLike[str] | None = None, **_: Any) -> None:
        """Restore a save_state folder; without one, the newest automatic checkpoint (and save_iteration
        moves past it, so the next save_state does not collide with it). A save still being written
        (async_save) is finished first."""
        async_save_module.finish_pending()
        if input_dir is None:
            input_dir = naming.latest_checkpoint(self.project_dir)
            number = naming.checkpoint_number(input_dir) or 0
            self.save_iteration = max(self.save_iteration, number + 1)
        overrides = checkpoint.load_state(self._training_objects(), self._ranks(), input_dir)
        self.step = overrides.get("step", self.step)
        self._continue_tracker_runs(input_dir)
        memory_phases.phase_ended()

    def _periodic_saves(self) -> PeriodicSaves | None:
        """ProjectConfiguration.save_every_n_steps / save_every_n_minutes for the prepared loaders (one
        counter for all; the time decided by rank 0's clock, checkpointing/periodic.py)."""
        project = self.project_configuration
        every, minutes = project.save_every_n_steps, project.save_every_n_minutes
        if every is None and minutes is None:
            return None
        if self.project_dir is None:
            naming.checkpoints_folder(None)  # raises: periodic saves are named automatically
        if getattr(self, "_periodic", None) is None:

            def optimizer_steps() -> int:
                return max((getattr(o, "steps_taken", 0) for o in self._optimizers), default=0)

            self._periodic = PeriodicSaves(
                every,
                optimizer_steps,
                self.save_state,
                every_seconds=None if minutes is None else 60.0 * minutes,
                agree=rank_zero_decides(self.device),
            )
        return self._periodic

    def _training_objects(self) -> checkpoint.TrainingObjects:
        held = ("models", "optimizers", "schedulers", "dataloaders", "custom_objects")
        return checkpoint.TrainingObjects(
            strategy=self.strategy,
            **{kind: getattr(self, f"_{kind}") for kind in held},
            scaler=self.precision.scaler,
            step=self.step,
            save_hooks=list(self._save_model_state_pre_hook.values()),
            load_hooks=list(self._load_model_state_pre_hook.values()),
            tracker_runs=self._tracker_runs(),
        )

    def _ranks(self) -> checkpoint.Ranks:
        return checkpoint.Ranks(self.process_index, self.is_main_process, self.wait_for_everyone)

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
        self.step = 0
        gc.collect()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.empty_cache()
        memory_phases.phase_ended()
        return [None] * len(objects)

    clear = free_memory

    def end_training(self) -> None:
        """Wait for every process, then tear down the process group (as Accelerate does) and forget
        this run's state, so a new Accelerator starts fresh. A save still being written (async_save) is
        finished first, up to a bound said in the log (checkpointing/async_save.py).

        Inside notebook_launch's workers the group is kept until the worker exits: destroying a gloo
        group while a DDP model still referenced it made the model's destructor hang when the
        training function returned (seen intermittently), and the worker exits without teardown.
        """
        async_save_module.wait_for_checkpoints("end_training()")
        self.wait_for_everyone()
        reset_state(destroy_process_group=teardown_on_end())
