"""The other trackers Accelerate ships, where they run offline here (issue 12, Trackers): Trackio
(local SQLite), Comet (offline archives), Aim (local repository), ClearML (offline session), and,
when installed (not in the test extra: DVCLive pulls in DVC, SwanLab needs protobuf < 7), DVCLive
and SwanLab (offline), on 2 real processes, read back with each tool's reader or offline format;
resumed runs continue (all but ClearML). A tracker whose package is missing is skipped, saying so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from tracker_trainers import two_sessions

from notebook_launcher import notebook_launch
from notebook_launcher.runtime.trackers import is_tracker_available

pytestmark = pytest.mark.slow  # ClearML's offline close alone takes ~10 s here

CANDIDATES = ("trackio", "comet_ml", "aim", "dvclive", "swanlab", "clearml")
OTHERS = [name for name in CANDIDATES if is_tracker_available(name)]
RESUMABLE = [name for name in OTHERS if name != "clearml"]  # ClearML continues tasks its own way
ONCE = [name for name in OTHERS if name == "clearml"]
LOSSES = [(step, 1.0 / (step + 1)) for step in range(5)]


def _env(folder: Path) -> dict[str, str]:
    return {
        "TRACKIO_DIR": str(folder / "trackio"),
        "COMET_OFFLINE_DIRECTORY": str(folder / "comet"),
        "CLEARML_OFFLINE_MODE": "1",
        "CLEARML_CACHE_DIR": str(folder / "clearml"),
        "HOME": str(folder),  # ClearML writes ~/.clearml
    }


def _need(name: str) -> None:
    if name not in OTHERS:
        pytest.skip(f"{name} is not installed (pip install {name}); its tracker was not tried")


@pytest.fixture(scope="module")
def others(tmp_path_factory):
    """One launch: log steps 0-2 and save; a new Accelerator loads that checkpoint and logs 3-4;
    then ClearML alone, steps 0-2."""
    if not OTHERS:
        pytest.skip(f"none of {', '.join(CANDIDATES)} is installed")
    folder = tmp_path_factory.mktemp("others")
    with pytest.MonkeyPatch.context() as mp:
        for key, value in _env(folder).items():
            mp.setenv(key, value)
        result = notebook_launch(
            two_sessions,
            args=(RESUMABLE, RESUMABLE, ONCE, str(folder)),
            num_processes=2,
            quiet=True,
            timeout=300,
        )
    return SimpleNamespace(
        folder=folder,
        first=[r["first"] for r in result],
        second=[r["second"] for r in result],
        once=[r["once"] for r in result],
    )


def test_trackio_run_holds_the_history_and_continues(others):
    _need("trackio")
    name = others.first[0]["runs"]["trackio"]["name"]
    assert others.second[0]["runs"]["trackio"]["name"] == name
    code = "import json, sys, trackio; print(json.dumps(trackio.SQLiteStorage.get_logs('proj', sys.argv[1])))"
    env = {**os.environ, "TRACKIO_DIR": str(others.folder / "trackio")}
    out = subprocess.run(
        [sys.executable, "-c", code, name], env=env, capture_output=True, text=True, check=True
    )
    assert [(row["step"], row["loss"]) for row in json.loads(out.stdout.splitlines()[-1])] == LOSSES
    code = "import json, trackio; print(json.dumps(trackio.SQLiteStorage.get_runs('proj')))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.splitlines()[-1]) == [name]  # the fresh run of launch 2 was dropped


def _comet_archives(folder: Path) -> list[tuple[str, list]]:
    archives = []
    for path in sorted((folder / "comet").glob("*.zip")):
        with zipfile.ZipFile(path) as z:
            key = json.loads(z.read("experiment.json"))["offline_id"]
            messages = [json.loads(line) for line in z.read("messages.json").decode().splitlines()]
        metrics = [m["payload"]["metric"] for m in messages if m["type"] == "metric_msg"]
        archives.append((key, [(m["step"], m["metricValue"]) for m in metrics if m["metricName"] == "loss"]))
    return archives


def test_comet_offline_experiment_holds_the_history_and_continues(others):
    _need("comet_ml")
    key = others.first[0]["runs"]["comet_ml"]["experiment_key"]
    archives = _comet_archives(others.folder)
    assert {k for k, _ in archives if _} == {key}  # every archive with metrics is this experiment
    assert sorted(row for _, rows in archives for row in rows) == LOSSES


def test_aim_run_continues_in_one_repository(others):
    _need("aim")
    from aim import Repo

    run_hash = others.first[0]["runs"]["aim"]["run_hash"]
    assert others.second[0]["runs"]["aim"]["run_hash"] == run_hash
    assert list(Repo.from_path(str(others.folder)).list_all_runs()) == [run_hash]


def test_clearml_offline_session_holds_the_scalars(others):
    _need("clearml")
    (session,) = (others.folder / "clearml" / "offline").glob("*.zip")
    with zipfile.ZipFile(session) as z:
        events = [e for line in z.read("metrics.jsonl").decode().splitlines() for e in json.loads(line)]
    scalars = [(e["iter"], e["value"]) for e in events if e["type"] == "training_stats_scalar"]
    assert [(e["metric"], e["variant"]) for e in events if e["type"] == "training_stats_scalar"] == [
        ("loss", "train")
    ] * 3
    assert scalars == LOSSES[:3]


def test_only_the_main_process_wrote(others):
    """Every tracker file above comes from rank 0: rank 1 opened no run."""
    assert others.first[1]["runs"] == others.second[1]["runs"] == others.once[1]["runs"] == {}


def test_dvclive_files_hold_the_history_and_continue(others):
    _need("dvclive")
    rows = (others.folder / "dvclive" / "plots" / "metrics" / "loss.tsv").read_text().split()
    assert rows[:2] == ["step", "loss"]
    assert [(int(rows[i]), float(rows[i + 1])) for i in range(2, len(rows), 2)] == LOSSES
    assert "lr: 0.05" in (others.folder / "dvclive" / "params.yaml").read_text()


def test_swanlab_offline_run_continues_with_the_same_id(others):
    _need("swanlab")
    run_id = others.first[0]["runs"]["swanlab"]["id"]
    folders = sorted((others.folder / "swanlog").glob("run-*"))
    assert len(folders) == 2 and all(f.name.endswith(run_id) for f in folders)  # no fresh run left
    assert all("lr:" in (f / "files" / "config.yaml").read_text() for f in folders)
