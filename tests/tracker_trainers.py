"""Training functions and custom trackers the tracker tests launch (importable, so spawn finds them)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader
from trainers import regression_data, regression_model

from notebook_launcher import Accelerator
from notebook_launcher.runtime.trackers import GeneralTracker, on_main_process


class RecordingTracker(GeneralTracker):
    """A custom tracker as a user writes one: undecorated methods, so only the Accelerator's gating
    decides where they run. Every call lands in calls_rank{RANK}.jsonl."""

    name = "recorder"
    requires_logging_directory = False

    def __init__(self, folder: str) -> None:
        super().__init__()
        self.folder = folder
        self.run = {"opened": True}

    @property
    def tracker(self) -> dict:
        return self.run

    def _record(self, call: str, **data) -> None:
        path = Path(self.folder) / f"calls_rank{os.environ.get('RANK', '0')}.jsonl"
        with open(path, "a") as f:
            f.write(json.dumps({"call": call, **data}) + "\n")

    def start(self) -> None:
        self._record("start")

    def store_init_configuration(self, values: dict) -> None:
        self._record("config", values=values)

    def log(self, values: dict, step: int | None = None, **kwargs) -> None:
        self._record("log", values=values, step=step, kwargs=kwargs)

    def finish(self) -> None:
        self._record("finish")


class MainOnlyTracker(RecordingTracker):
    """Decorated like Accelerate's built-ins: main_process_only=True keeps calls on rank 0."""

    name = "main_only"

    @on_main_process
    def log(self, values: dict, step: int | None = None, **kwargs) -> None:
        self._record("main_only_log", step=step)


class EveryRankTracker(RecordingTracker):
    """main_process_only=False (as W&B, Trackio, SwanLab): decorated methods run on every rank."""

    name = "every_rank"
    main_process_only = False

    @on_main_process
    def log(self, values: dict, step: int | None = None, **kwargs) -> None:
        self._record("every_rank_log", step=step)


def open_trackers(
    acc: Accelerator,
    folder: str,
    config: dict,
    resume: bool,
    load_before_init: bool,
    init_kwargs: dict | None = None,
) -> str:
    """init_trackers("proj"); with `resume`, the checkpoint in `folder` loaded after it (as
    Accelerate's examples do), or before it with `load_before_init`. Returns the checkpoint's path."""
    checkpoint = os.path.join(folder, "ckpt")
    if resume and load_before_init:
        acc.load_state(checkpoint)
    acc.init_trackers("proj", config=config, init_kwargs=init_kwargs)
    if resume and not load_before_init:
        acc.load_state(checkpoint)
    return checkpoint


def train_and_track(
    folder: str,
    log_with: list,
    steps: range,
    resume: bool = False,
    load_before_init: bool = False,
) -> dict:
    """Train the regression model for `steps`, logging the loss of each step to `log_with` (names
    plus a RecordingTracker); save a checkpoint at the end; with `resume`, load it first (after
    init_trackers, as Accelerate's examples do, or before when `load_before_init`)."""
    recorder = RecordingTracker(folder)
    acc = Accelerator(log_with=[*log_with, recorder], project_dir=folder)
    model = regression_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(regression_data(), batch_size=8)
    model, opt, loader = acc.prepare(model, opt, loader)
    checkpoint = open_trackers(acc, folder, {"lr": 0.05, "batch_size": 8}, resume, load_before_init)
    batches = iter(loader)
    losses = []
    for step in steps:
        x, y = next(batches)
        loss = nn.functional.mse_loss(model(x), y)
        acc.backward(loss)
        opt.step()
        opt.zero_grad()
        acc.log({"loss": loss}, step=step)  # a tensor, as in Accelerate's examples
        losses.append(loss.item())
    MainOnlyTracker(folder).log({}, step=0)  # direct calls on every rank: the decorator decides
    EveryRankTracker(folder).log({}, step=0)
    acc.save_state(checkpoint)
    unwrapped = {name: type(acc.get_tracker(name, unwrap=True)).__name__ for name in log_with}
    acc.end_training()
    return {"pid": os.getpid(), "losses": losses, "unwrapped": unwrapped}


def log_to(
    log_with: list,
    folder: str,
    steps: range,
    resume: bool = False,
    load_before_init: bool = False,
    init_kwargs: dict | None = None,
    crash_after: int | None = None,
) -> dict:
    """No model: open trackers, log 1/(step+1) per step, save a checkpoint, finish; with `resume`,
    load that checkpoint first (after init_trackers, or before it with `load_before_init`). With
    `crash_after`, the checkpoint is taken at that step and later steps are what a crash loses
    (logged as 100 + 1/(step+1), so they show if they survive)."""
    acc = Accelerator(log_with=log_with, project_dir=folder)
    checkpoint = open_trackers(acc, folder, {"lr": 0.05}, resume, load_before_init, init_kwargs)
    runs = {}
    for step in steps:
        lost = crash_after is not None and step > crash_after
        acc.log({"loss": 1.0 / (step + 1) + (100 if lost else 0)}, step=step)
        if step == (steps[-1] if crash_after is None else crash_after):
            runs = {t.name: t.run_state() for t in acc.trackers}
            acc.save_state(checkpoint)
    acc.end_training()
    return {"pid": os.getpid(), "runs": runs}


QUIET_CLEARML = {"clearml": {"auto_connect_frameworks": {"detect_repository": False}}}


def two_sessions(first: list, second: list, once: list, folder: str) -> dict:
    """`log_to` twice in one process (the second resumes from the first's checkpoint), then once for
    `once`: the libraries are imported once, which is most of their cost. Comet is told to log only
    what it is given."""
    init_kwargs = {
        "trackio": {"auto_log_cpu": False, "auto_log_gpu": False},
        "swanlab": {"mode": "offline", "log_dir": os.path.join(folder, "swanlog")},
        # dvcyaml=False: DVCLive would otherwise add its stage to a dvc.yaml at the git root (this checkout)
        "dvclive": {"dir": os.path.join(folder, "dvclive"), "save_dvc_exp": False, "dvcyaml": False},
        # Aim and SwanLab both wrap sys.stdout; in one process Aim's wrapper then recursed forever
        "aim": {"capture_terminal_logs": False, "system_tracking_interval": None},
    }
    if "comet_ml" in first:
        import comet_ml

        quiet = comet_ml.ExperimentConfig(
            log_code=False, log_git_metadata=False, log_git_patch=False, log_env_details=False,
            log_env_gpu=False, log_env_cpu=False, log_env_host=False, auto_output_logging=False,
        )  # fmt: skip
        init_kwargs["comet_ml"] = {"online": False, "experiment_config": quiet}
    return {
        "first": log_to(first, folder, range(0, 3), init_kwargs=init_kwargs),
        "second": log_to(second, folder, range(3, 5), resume=True, init_kwargs=init_kwargs),
        # last: once a ClearML task has run, a later Aim run silently ended this process (seen here)
        # ClearML's repository and package scan runs in a thread that Task.close() joins without a
        # bound; in a forked worker of a busy test process it deadlocked twice here (the scan is not
        # what this test is about: the scalars are)
        "once": log_to(once, folder, range(0, 3), init_kwargs=QUIET_CLEARML) if once else {"runs": {}},
    }


def crash_and_resume(folder: str) -> dict:
    """Log steps 0-5 but checkpoint at 3 (4 and 5 are lost in a crash); resume and log 4-7."""
    return {
        "crashed": log_to(["tensorboard"], folder, range(0, 6), crash_after=3),
        "resumed": log_to(["tensorboard"], folder, range(4, 8), resume=True),
    }
