"""Accelerate 1.x's configuration objects for the Accelerator, same names, fields and defaults:
DataLoaderConfiguration, ProjectConfiguration, GradientAccumulationPlugin.

Plain dataclasses (no torch), validated on construction so a bad value fails where it is written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ...errors import ConfigError
from .kwargs import KwargsHandler


@dataclass
class DataLoaderConfiguration:
    """How `prepare` shards data loaders (Accelerate's `dataloader_config=`).

    split_batches: cut each batch of the original loader into one slice per process (its batch size
    must divide by the number of processes) instead of giving each process whole batches.
    dispatch_batches: only the main process iterates the original loader and sends each process its
    batches (default: True for an IterableDataset, else False).
    even_batches: complete the last round with samples from the start so every process takes the
    same number of steps; gather_for_metrics drops those duplicates.
    use_seedable_sampler / data_seed: a RandomSampler becomes a SeedableRandomSampler, re-seeded
    with data_seed (default: torch's initial seed, what set_seed set) plus the epoch at each pass, so
    `set_seed(s); loader.set_epoch(e)` replays an order. Without it the order comes from the
    sampler's own generator, as in Accelerate.
    non_blocking: move batches to the device with non_blocking=True.
    use_stateful_dataloader: accepted; our loaders always save and restore their position.
    """

    split_batches: bool = False
    dispatch_batches: bool | None = None
    even_batches: bool = True
    use_seedable_sampler: bool = False
    data_seed: int | None = None
    non_blocking: bool = False
    use_stateful_dataloader: bool = False

    def __post_init__(self) -> None:
        for name in ("split_batches", "even_batches", "use_seedable_sampler", "non_blocking"):
            _check_bool(f"DataLoaderConfiguration.{name}", getattr(self, name))
        if self.dispatch_batches is not None:
            _check_bool("DataLoaderConfiguration.dispatch_batches", self.dispatch_batches)
        if self.data_seed is not None and (
            isinstance(self.data_seed, bool) or not isinstance(self.data_seed, int)
        ):
            raise ConfigError(
                f"DataLoaderConfiguration.data_seed={self.data_seed!r} must be an integer or None."
            )


@dataclass
class ProjectConfiguration:
    """Where a run keeps its files and how save_state names and rotates checkpoints.

    With automatic_checkpoint_naming, save_state() writes `{project_dir}/checkpoints/checkpoint_{i}`
    (i = iteration, +1 per save) and keeps at most total_limit of them; load_state() without a
    folder loads the newest. logging_dir defaults to project_dir.

    async_save (ours; Accelerate has no asynchronous save): save_state()'s default for its async_save
    argument: return once the state is copied to host memory and write it in the background.
    save_every_n_steps (ours): save_state() (automatic naming, total_limit rotation) every N optimizer
    steps, at the end of the training batch, without a call in the loop (checkpointing/periodic.py).
    save_every_n_minutes (ours; Accelerate has no periodic saves): the same every T minutes (a float),
    by rank 0's clock, agreed by every rank at the same step; with save_every_n_steps too, whichever
    comes first (each save restarts both counts).
    """

    project_dir: str | None = None
    logging_dir: str | None = None
    automatic_checkpoint_naming: bool = False
    total_limit: int | None = None
    iteration: int = 0
    save_on_each_node: bool = False
    async_save: bool = False
    save_every_n_steps: int | None = None
    save_every_n_minutes: float | None = None

    def set_directories(self, project_dir: str | os.PathLike[str] | None = None) -> None:
        """Set project_dir, and logging_dir too when it was not given."""
        self.project_dir = os.fspath(project_dir) if project_dir is not None else None
        if self.logging_dir is None:
            self.logging_dir = self.project_dir

    def __post_init__(self) -> None:
        if self.logging_dir is not None:
            self.logging_dir = os.fspath(self.logging_dir)
        self.set_directories(self.project_dir)
        if self.total_limit is not None and (
            isinstance(self.total_limit, bool)
            or not isinstance(self.total_limit, int)
            or self.total_limit < 1
        ):
            raise ConfigError(
                f"ProjectConfiguration.total_limit={self.total_limit!r} must be a whole number >= 1 "
                "(how many checkpoints to keep), or None to keep all."
            )
        _check_bool("ProjectConfiguration.async_save", self.async_save)
        every = self.save_every_n_steps
        if every is not None and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
            raise ConfigError(
                f"ProjectConfiguration.save_every_n_steps={every!r} must be a whole number >= 1 (optimizer "
                "steps between checkpoints), or None to save only when save_state() is called."
            )
        minutes = self.save_every_n_minutes
        if minutes is not None and (
            isinstance(minutes, bool)
            or not isinstance(minutes, (int, float))
            or not 0 < minutes < float("inf")
        ):
            raise ConfigError(
                f"ProjectConfiguration.save_every_n_minutes={minutes!r} must be a number of minutes > 0 (e.g. 30 or "
                "0.5), or None to save only by steps or when save_state() is called."
            )
        if isinstance(self.iteration, bool) or not isinstance(self.iteration, int) or self.iteration < 0:
            raise ConfigError(
                f"ProjectConfiguration.iteration={self.iteration!r} must be a whole number >= 0."
            )


@dataclass
class GradientAccumulationPlugin(KwargsHandler):
    """Gradient accumulation settings (Accelerate's `gradient_accumulation_plugin=`).

    num_steps: batches per optimizer step. sync_with_dataloader: the last batch of a loader always
    completes a step (and restarts the count). sync_each_batch: all-reduce gradients on every batch
    instead of only on the step's last one (less memory, more communication). adjust_scheduler:
    accepted; in Accelerate it only advances the scheduler's private `_step_count`.
    """

    num_steps: int | None = None
    adjust_scheduler: bool = True
    sync_with_dataloader: bool = True
    sync_each_batch: bool = False

    def __post_init__(self) -> None:
        if self.num_steps is not None and (
            isinstance(self.num_steps, bool) or not isinstance(self.num_steps, int) or self.num_steps < 1
        ):
            raise ConfigError(
                f"GradientAccumulationPlugin.num_steps={self.num_steps!r} must be a whole number >= 1."
            )
        for name in ("adjust_scheduler", "sync_with_dataloader", "sync_each_batch"):
            _check_bool(f"GradientAccumulationPlugin.{name}", getattr(self, name))


def _check_bool(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"{name}={value!r} must be True or False.")
