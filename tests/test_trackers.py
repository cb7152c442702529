"""Experiment trackers on 2 real processes (gloo): TensorBoard, W&B (offline) and MLflow (local file
store) plus a custom tracker, read back with each tool's reader; main-process gating; metrics still
reaching the notebook; a resumed training continuing the same tracker runs (issue 12, Trackers).

One module fixture launches twice: steps 0-3 then save_state; a new launch with init_trackers,
load_state (Accelerate's example order) and steps 4-7. The tests read what those launches left.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from installed import skip_module_unless_installed
from tracker_readers import event_file_pids, mlflow_runs, tensorboard_scalars, wandb_offline_run
from tracker_trainers import crash_and_resume, log_to, train_and_track

from notebook_launcher import notebook_launch

skip_module_unless_installed("tensorboard", "wandb", "mlflow")

pytestmark = pytest.mark.slow  # each launch imports three tracker libraries (~10-20 s here)

NAMES = ["tensorboard", "wandb", "mlflow"]


def _tracker_env(folder: Path) -> dict[str, str]:
    """Everything local: W&B offline in the folder, MLflow's file store in the folder."""
    return {
        "WANDB_MODE": "offline",
        "WANDB_DIR": str(folder),
        "WANDB_SILENT": "true",
        "MLFLOW_TRACKING_URI": (folder / "mlruns").as_uri(),
        "MLFLOW_ALLOW_FILE_STORE": "true",  # MLflow 3 keeps the file store behind this switch
    }


def _launch(function, *args):
    return notebook_launch(function, args=args, num_processes=2, quiet=True, timeout=240)


def _mlflow_runs(folder: Path) -> list:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
        return mlflow_runs(_tracker_env(folder)["MLFLOW_TRACKING_URI"], "proj")


def _wandb_runs(folder: Path) -> list[dict]:
    return [wandb_offline_run(d) for d in sorted((folder / "wandb").glob("offline-run-*"))]


def _f32(values):
    """TensorBoard stores scalars as float32: the logged floats after that one rounding."""
    return [float(np.float32(v)) for v in values]


@pytest.fixture(scope="module")
def tracked(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tracked")
    with pytest.MonkeyPatch.context() as mp:
        for key, value in _tracker_env(folder).items():
            mp.setenv(key, value)
        first = _launch(train_and_track, str(folder), NAMES, range(0, 4))
        after_first = SimpleNamespace(
            tensorboard=tensorboard_scalars(folder / "proj", "loss"),
            wandb=_wandb_runs(folder),
            mlflow=_mlflow_runs(folder),
            checkpoint_runs=json.loads((folder / "ckpt" / "trackers.json").read_text()),
        )
        second = _launch(train_and_track, str(folder), NAMES, range(4, 8), True)
    return SimpleNamespace(folder=folder, first=first, second=second, after_first=after_first)


def test_tensorboard_events_hold_rank_0s_losses_and_only_rank_0_wrote(tracked):
    losses = tracked.first[0]["losses"]
    assert tracked.after_first.tensorboard == list(zip(range(4), _f32(losses), strict=True))
    assert tracked.first[1]["losses"] != losses  # rank 1 saw other batches: its values would show
    pids = event_file_pids(tracked.folder / "proj")
    assert pids == {tracked.first[0]["pid"], tracked.second[0]["pid"]}  # rank 1 never wrote a file


def test_mlflow_run_holds_the_metric_history_and_the_config(tracked):
    ((run, history),) = tracked.after_first.mlflow
    assert history == {"loss": list(enumerate(tracked.first[0]["losses"]))}  # float64: exact
    assert run.data.params == {"lr": "0.05", "batch_size": "8"}


def test_wandb_offline_run_holds_the_history_and_the_config(tracked):
    (run,) = tracked.after_first.wandb
    rows = [(row["_step"], row["loss"]) for row in run["history"]]
    assert rows == list(enumerate(tracked.first[0]["losses"]))
    assert run["project"] == "proj"
    assert run["config"]["lr"] == 0.05 and run["config"]["batch_size"] == 8


def test_metrics_still_reach_the_notebook_from_every_rank(tracked):
    for rank in (0, 1):
        rows = tracked.first.metrics_for(rank)
        assert [(r["step"], r["loss"]) for r in rows] == list(enumerate(tracked.first[rank]["losses"]))


def test_a_custom_tracker_is_driven_on_the_main_process_only(tracked):
    def calls(rank):
        path = tracked.folder / f"calls_rank{rank}.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    one_launch = ["start", "config", "log", "log", "log", "log", "main_only_log", "every_rank_log", "finish"]
    assert [c["call"] for c in calls(0)] == one_launch * 2
    assert [c["step"] for c in calls(0) if c["call"] == "log"] == list(range(8))
    assert calls(0)[1]["values"] == {"lr": 0.05, "batch_size": 8}
    # rank 1: the Accelerator never called it; a main_process_only=False method called directly ran
    assert [c["call"] for c in calls(1)] == ["every_rank_log"] * 2


def test_get_tracker_unwraps_on_the_main_process_and_is_blank_elsewhere(tracked):
    assert tracked.first[0]["unwrapped"] == {
        "tensorboard": "SummaryWriter",
        "wandb": "Run",
        "mlflow": "ActiveRun",
    }
    assert set(tracked.first[1]["unwrapped"].values()) == {"GeneralTracker"}


def test_save_state_records_the_tracker_runs(tracked):
    runs = tracked.after_first.checkpoint_runs
    assert set(runs) == set(NAMES)  # the custom tracker has no run_state: nothing saved for it
    assert runs["mlflow"]["run_id"] == tracked.after_first.mlflow[0][0].info.run_id
    assert runs["wandb"]["id"] == tracked.after_first.wandb[0]["id"]
    assert runs["tensorboard"] == {"logging_dir": str(tracked.folder / "proj"), "step": 3}


def test_a_resumed_training_continues_the_same_tracker_runs(tracked):
    losses = tracked.first[0]["losses"] + tracked.second[0]["losses"]
    steps = list(range(8))
    # TensorBoard: one run folder, all eight steps
    assert tensorboard_scalars(tracked.folder / "proj", "loss") == list(zip(steps, _f32(losses), strict=True))
    # MLflow: one live run with the whole history; the run init_trackers opened before load_state
    # logged nothing and was deleted
    runs = _mlflow_runs(tracked.folder)
    live = [(run, history) for run, history in runs if run.info.lifecycle_stage == "active"]
    assert [run.info.run_id for run, _ in live] == [tracked.after_first.mlflow[0][0].info.run_id]
    assert live[0][1] == {"loss": list(zip(steps, losses, strict=True))}
    assert [history for run, history in runs if run.info.lifecycle_stage == "deleted"] == [{}]
    # W&B offline: the first folder and the resumed one share the run id; no other run is left
    wandb_runs = _wandb_runs(tracked.folder)
    assert {run["id"] for run in wandb_runs} == {tracked.after_first.wandb[0]["id"]}
    rows = [(row["_step"], row["loss"]) for run in wandb_runs for row in run["history"]]
    assert sorted(rows) == list(zip(steps, losses, strict=True))
    assert all(run["config"]["lr"] == 0.05 for run in wandb_runs)  # the resumed part has it too


def test_load_state_before_init_trackers_opens_no_new_run(tmp_path):
    with pytest.MonkeyPatch.context() as mp:
        for key, value in _tracker_env(tmp_path).items():
            mp.setenv(key, value)
        first = _launch(log_to, NAMES, str(tmp_path), range(0, 3))
        second = _launch(log_to, NAMES, str(tmp_path), range(3, 5), True, True)
    assert second[0]["runs"] == first[0]["runs"] | {"tensorboard": second[0]["runs"]["tensorboard"]}
    ((run, history),) = _mlflow_runs(tmp_path)
    assert history == {"loss": [(s, 1.0 / (s + 1)) for s in range(5)]}
    wandb_runs = _wandb_runs(tmp_path)
    assert len(wandb_runs) == 2 and {r["id"] for r in wandb_runs} == {first[0]["runs"]["wandb"]["id"]}
    assert tensorboard_scalars(tmp_path / "proj", "loss") == [
        (s, float(np.float32(1.0 / (s + 1)))) for s in range(5)
    ]


def test_tensorboard_hides_what_a_crash_logged_after_the_checkpoint(tmp_path):
    """Steps 4-5 were logged after the checkpoint at step 3, then lost; the resumed run logs 4-7
    again, and TensorBoard (purge_step) shows the resumed values only, as one run."""
    _launch(crash_and_resume, str(tmp_path))
    scalars = tensorboard_scalars(tmp_path / "proj", "loss")
    assert scalars == [(s, float(np.float32(1.0 / (s + 1)))) for s in range(8)]
