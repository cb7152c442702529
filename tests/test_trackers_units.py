"""What `log_with=` accepts and refuses, in one process (issue 12, Trackers): Accelerate's names and
LoggerType values, "all", custom trackers (instances and registered classes), a missing package
skipped with one line, clear errors for bad input."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from notebook_launcher import Accelerator, ConfigError
from notebook_launcher.config.enums import LoggerType
from notebook_launcher.runtime import reset_state
from notebook_launcher.runtime.trackers import (
    LOGGER_TYPE_TO_CLASS,
    GeneralTracker,
    filter_trackers,
    get_available_trackers,
    register_tracker_class,
)


@pytest.fixture(autouse=True)
def fresh_state():
    reset_state()
    yield
    reset_state()


class ListTracker(GeneralTracker):
    name = "list"
    requires_logging_directory = False

    def __init__(self, run_name: str = "", logging_dir=None, **kwargs) -> None:
        super().__init__()
        self.run_name, self.logging_dir, self.kwargs = run_name, logging_dir, kwargs
        self.calls: list = []

    @property
    def tracker(self):
        return self.calls

    def start(self):
        self.calls.append(("start",))

    def store_init_configuration(self, values):
        self.calls.append(("config", values))

    def log(self, values, step=None, **kwargs):
        self.calls.append(("log", values, step, kwargs))

    def finish(self):
        self.calls.append(("finish",))


def test_logger_type_has_accelerates_names_and_values():
    accelerate_utils = pytest.importorskip("accelerate.utils")
    assert {m.name: m.value for m in LoggerType} == {m.name: m.value for m in accelerate_utils.LoggerType}
    assert "wandb" in LoggerType and "nope" not in LoggerType and LoggerType("all") is LoggerType.ALL


@pytest.mark.parametrize(
    "log_with",
    ["tensorboard", LoggerType.MLFLOW, ["wandb", "tensorboard", "wandb"], "all", ["all", "mlflow"]],
    ids=str,
)
def test_log_with_picks_what_accelerate_picks(log_with, tmp_path):
    accelerate_tracking = pytest.importorskip("accelerate.tracking")
    accelerate_utils = pytest.importorskip("accelerate.utils")

    def theirs_in(value):  # the same request with Accelerate's own enum
        if isinstance(value, list):
            return [theirs_in(v) for v in value]
        return accelerate_utils.LoggerType(value.value) if isinstance(value, LoggerType) else value

    ours = [str(t) for t in filter_trackers(log_with, tmp_path)]
    theirs = [str(t) for t in accelerate_tracking.filter_trackers(theirs_in(log_with), tmp_path)]
    assert ours == theirs


def test_a_custom_tracker_instance_is_driven_like_a_built_in(tmp_path):
    custom = ListTracker()
    acc = Accelerator(log_with=custom)
    acc.init_trackers("proj", config={"lr": 0.1}, init_kwargs={"list": {"ignored": True}})
    acc.log({"loss": torch.tensor(0.5), "acc": 1}, step=3, log_kwargs={"list": {"commit": False}})
    assert acc.trackers == [custom] and acc.get_tracker("list") is custom
    assert acc.get_tracker("list", unwrap=True) is custom.calls
    acc.end_training()
    assert custom.calls == [
        ("start",),
        ("config", {"lr": 0.1}),
        ("log", {"loss": 0.5, "acc": 1}, 3, {"commit": False}),  # a one-element tensor arrives as a float
        ("finish",),
    ]
    assert type(custom.calls[2][1]["loss"]) is float


def test_a_registered_tracker_class_is_used_by_name(tmp_path):
    class DirTracker(ListTracker):
        name = "dir_tracker"
        requires_logging_directory = True

    register_tracker_class(DirTracker)
    try:
        acc = Accelerator(log_with="dir_tracker", project_dir=tmp_path)
        acc.init_trackers("proj", init_kwargs={"dir_tracker": {"flush_secs": 5}})
    finally:
        del LOGGER_TYPE_TO_CLASS["dir_tracker"]
    (tracker,) = acc.trackers
    assert (tracker.run_name, tracker.logging_dir, tracker.kwargs) == (
        "proj",
        str(tmp_path),
        {"flush_secs": 5},
    )
    with pytest.raises(ConfigError, match="subclass of GeneralTracker"):
        register_tracker_class(dict)


def test_all_adds_custom_instances_to_every_installed_tracker(tmp_path):
    custom = ListTracker()
    chosen = filter_trackers(["all", custom], tmp_path)
    assert chosen == [custom, *get_available_trackers()]


def test_a_missing_package_is_skipped_with_one_line(tmp_path, monkeypatch, capsys):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real_find_spec(name, *a)
    )
    pytest.importorskip("tensorboard")
    acc = Accelerator(log_with=["wandb", "tensorboard"], project_dir=tmp_path)
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [
        "notebook_launcher: log_with 'wandb' skipped: the 'wandb' package is not installed: pip install wandb (or pip install '.[wandb]' from a notebook_launcher clone)."
    ]
    assert acc.log_with == [LoggerType.TENSORBOARD]
    acc.init_trackers("proj")
    acc.log({"loss": 1.0}, step=0)
    acc.end_training()
    assert [t.name for t in acc.trackers] == ["tensorboard"]
    assert list((tmp_path / "proj").glob("events.out.tfevents.*"))


@pytest.mark.parametrize(
    "log_with, message",
    [
        ("tensorbord", r"log_with='tensorbord' is not a tracker.*Did you mean 'tensorboard'\?"),
        (ListTracker, r"got the class ListTracker; pass an instance"),
        (42, r"log_with=42 is not a tracker"),
        (
            "tensorboard",
            r"Logging with `tensorboard` requires a `logging_dir`.*pass Accelerator\(project_dir=\.\.\.\)",
        ),
    ],
)
def test_bad_log_with_says_what_to_pass(log_with, message):
    with pytest.raises(ConfigError, match=message):
        Accelerator(log_with=log_with)


def test_get_tracker_names_what_is_there(tmp_path):
    assert type(Accelerator().get_tracker("wandb")) is GeneralTracker  # no trackers: a blank one
    reset_state()
    acc = Accelerator(log_with=ListTracker())
    acc.init_trackers("proj")
    with pytest.raises(ConfigError, match=r"get_tracker\('wandb'\).*it has \['list'\]"):
        acc.get_tracker("wandb")


def test_a_tracker_class_without_the_required_attributes_says_which():
    class Incomplete(GeneralTracker):
        name = "incomplete"

    with pytest.raises(NotImplementedError, match="`requires_logging_directory`, `tracker`"):
        Incomplete()
