"""TensorBoard through torch.utils.tensorboard (or tensorboardX): event files in logging_dir/run_name.

A resumed run writes into the saved folder with `purge_step` set to the step after the checkpoint,
so TensorBoard hides what a crashed session logged after that checkpoint and shows one run (the
fresh run a resume replaces wrote to the same folder).
"""

from __future__ import annotations

import os
import time
from typing import Any

import yaml

from .base import ResumableTracker, on_main_process, plain_values


class TensorBoardTracker(ResumableTracker):
    """Accelerate's TensorBoardTracker: `run_name`, `logging_dir`, kwargs for `SummaryWriter`."""

    name = "tensorboard"
    requires_logging_directory = True
    packages = (("tensorboard", ("tensorboard",)), ("tensorboardX", ("tensorboardX",)))
    handle = "writer"
    closes_with = "close"
    run_name: str
    writer: Any  # the SummaryWriter, set by start()
    logging_dir: str

    def __init__(self, run_name: str, logging_dir: str | os.PathLike[str], **kwargs: Any) -> None:
        super().__init__(run_name, **kwargs)
        self.logging_dir_param = logging_dir
        self._last_step: int | None = None

    def _resume_kwargs(self, state: dict) -> dict:
        step = state.get("step")
        return {} if step is None else {"purge_step": step + 1}

    def _open(self, kwargs: dict) -> Any:
        try:
            from torch.utils import tensorboard

            summary_writer = tensorboard.SummaryWriter
        except ModuleNotFoundError:  # only tensorboardX is installed
            import tensorboardX

            summary_writer = tensorboardX.SummaryWriter
        self.logging_dir = os.path.join(self.logging_dir_param, self.run_name)
        if self._resume:
            self.logging_dir = self._resume["logging_dir"]
            self._last_step = self._resume.get("step")
        return summary_writer(self.logging_dir, **kwargs)

    @on_main_process
    def store_init_configuration(self, values: dict) -> None:
        """Hyperparameters as TensorBoard hparams, and as hparams.yml in a timestamped sub-folder."""
        self.writer.add_hparams(values, metric_dict={})
        self.writer.flush()
        folder = os.path.join(self.logging_dir, str(time.time()))
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "hparams.yml"), "w") as f:
            yaml.dump(values, f)

    def _write(self, values: dict, step: int | None, **kwargs: Any) -> None:
        """Numbers (tensors too) as scalars, strings as text, dicts of numbers as grouped scalars."""
        for key, value in plain_values(values).items():
            if isinstance(value, (int, float)):
                self.writer.add_scalar(key, value, global_step=step, **kwargs)
            elif isinstance(value, str):
                self.writer.add_text(key, value, global_step=step, **kwargs)
            elif isinstance(value, dict):
                self.writer.add_scalars(key, value, global_step=step, **kwargs)
        self.writer.flush()
        if step is not None:
            self._last_step = step

    @on_main_process
    def log_images(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        for key, images in values.items():
            self.writer.add_images(key, images, global_step=step, **kwargs)

    def _saved_run(self) -> dict | None:
        return {"logging_dir": os.path.abspath(self.logging_dir), "step": self._last_step}
