"""save_state(async_save=True) on 2 CPU processes (gloo): the state is staged, written by a background
thread and published only when every rank's files are complete.

Exactness as in test_restarts.py: a resumed run does the uninterrupted run's float operations in
the same order, so the weights are compared with torch.equal. The writer is held (the saver's
before_write seam) until the training has changed every weight again: a save that wrote the live
tensors instead of its staged copy would resume from later weights and differ.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from async_checkpoint_trainers import async_save_under_deepspeed, kill_during_write, train
from restart_trainers import train as restart_train

from notebook_launcher import WorkerError, notebook_launch
from notebook_launcher.errors import ConfigError
from notebook_launcher.runtime.checkpointing import naming

FSDP_SHARDED = dict(distributed_type="FSDP", fsdp_config={"fsdp_state_dict_type": "SHARDED_STATE_DICT"})


def assert_same_weights(weights: dict, reference: dict) -> None:
    assert weights.keys() == reference.keys()
    for key in reference:
        assert torch.equal(weights[key], reference[key]), f"{key} differs from the uninterrupted run"


def test_ddp_async_saves_rotate_and_resume_bit_for_bit(tmp_path):
    """Four async saves with total_limit=2: exactly the last 2 folders are left, no hidden one; the
    last save (written while training went on) resumes to the uninterrupted run's weights."""
    run = notebook_launch(
        train,
        args=(str(tmp_path),),
        kwargs=dict(save_at=(2, 3, 4, 5), total_limit=2),
        num_processes=2,
        quiet=True,
    )
    checkpoints = tmp_path / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["checkpoint_2", "checkpoint_3"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no partial folder left
    records = run[0]["records"]
    assert [name for name, *_ in records] == [f"checkpoint_{i}" for i in range(4)]
    assert all(total is not None and total >= blocked > 0 for _, blocked, total, _ in records)
    assert all(staged > 0 for *_, staged in records)
    # what the launcher recorded (result.checkpoints): each published folder, in order, with its times
    shown = run.checkpoints
    assert [Path(c["path"]).name for c in shown] == [f"checkpoint_{i}" for i in range(4)], shown
    assert all(c["background"] and c["total_s"] >= c["blocked_s"] > 0 for c in shown), shown
    assert [c["step"] for c in shown] == sorted(c["step"] for c in shown)
    resumed = notebook_launch(
        train, args=(str(tmp_path),), kwargs=dict(save_at=(), resume=True), num_processes=2, quiet=True
    )
    for rank in (0, 1):
        assert_same_weights(resumed[rank]["weights"], run[rank]["weights"])


def test_fsdp2_sharded_async_save_resumes_bit_for_bit(tmp_path):
    run = notebook_launch(train, args=(str(tmp_path),), num_processes=2, quiet=True, **FSDP_SHARDED)
    folder = tmp_path / "checkpoints" / "checkpoint_0"
    assert len(list((folder / "pytorch_model_fsdp_0").glob("*.distcp"))) == 2  # one shard per rank
    resumed = notebook_launch(
        train,
        args=(str(tmp_path),),
        kwargs=dict(save_at=(), resume=True),
        num_processes=2,
        quiet=True,
        **FSDP_SHARDED,
    )
    assert_same_weights(resumed[0]["weights"], run[0]["weights"])


def test_tp_by_fsdp2_async_save_resumes_bit_for_bit(tmp_path):
    from parallel_trainers import save_and_resume

    result = notebook_launch(
        save_and_resume,
        args=({"dp_shard_size": 2, "tp_size": 2}, 2, str(tmp_path)),
        kwargs=dict(sharded=True, async_save=True),
        num_processes=4,
        timeout=240,
        quiet=True,
    )
    assert_same_weights(result[0]["resumed"], result[0]["straight"])


@pytest.mark.parametrize("where", ["workers", "in_process"])
def test_the_end_of_the_function_waits_for_the_save_in_flight(tmp_path, where):
    """The writer is held until the function has returned (its frame is gone): the folder must still
    be published, complete, before the launch returns."""
    how = dict(num_processes=2, quiet=True) if where == "workers" else dict(num_processes=1, in_process=True)
    result = notebook_launch(
        train, args=(str(tmp_path),), kwargs=dict(save_at=(1,), return_at_save=True, width=100_000), **how
    )
    assert result[0]["published_on_return"] is False  # still being written when the function returned
    folder = tmp_path / "checkpoints" / "checkpoint_0"
    names = {p.name for p in folder.iterdir()}
    assert {"model.safetensors", "optimizer.bin", "random_states_0.pkl"} <= names
    state = torch.load(folder / "optimizer.bin", weights_only=True)
    assert state["state"][0]["exp_avg"].shape == (100_000, 8)  # the whole optimizer state, readable


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run (synchronous saves) of restart_trainers.train."""
    result = notebook_launch(
        restart_train, args=(str(tmp_path_factory.mktemp("ref")),), num_processes=2, quiet=True
    )
    return result[0]["weights"]


# Every moment between two files of the write: rank 1 writes one file (its random states), rank 0
# five (the model, optimizer, scheduler, the registered object, its random states).
KILL_MOMENTS = [(1, 0)] + [(0, index) for index in range(5)]


@pytest.mark.parametrize("kill_rank, kill_index", KILL_MOMENTS)
def test_a_rank_killed_during_the_write_leaves_the_previous_checkpoint_latest(
    tmp_path, reference, kill_rank, kill_index
):
    """SIGKILL from the writer thread during checkpoint_1 (after step 8): checkpoint_1 is never
    published, the restart resumes from checkpoint_0 (step 4) and ends with the uninterrupted weights."""
    result = notebook_launch(
        restart_train,
        args=(str(tmp_path),),
        kwargs=dict(
            kill_rank=kill_rank, kill_at=8, kill_how="in_async_write", kill_index=kill_index, async_save=True
        ),
        num_processes=2,
        max_restarts=1,
        quiet=True,
    )
    assert result.restarts == 1 and result.failures[0].rank == kill_rank
    assert [value["resumed_at"] for value in result] == [4, 4]
    for value in result:
        assert_same_weights(value["weights"], reference)


@pytest.mark.parametrize("async_save", [False, True])
def test_periodic_saves_rotate_and_a_restart_resumes_from_the_last(tmp_path, reference, async_save):
    """save_every_n_steps=4 and no save_state() in the loop; rank 1 SIGKILLed after step 10: the
    restart resumes from step 8 (async: 8, or 4 when step 8's save was still being written) and ends
    with the uninterrupted weights; total_limit=2 leaves the last two saves: steps 16 and 20 (the loop
    breaks after step 24 without asking for another batch, so no save follows that step)."""
    result = notebook_launch(
        restart_train,
        args=(str(tmp_path),),
        kwargs=dict(kill_rank=1, kill_at=10, periodic=True, async_save=async_save),
        num_processes=2,
        max_restarts=1,
        quiet=True,
    )
    assert result.restarts == 1
    resumed = {value["resumed_at"] for value in result}
    assert resumed == {8} or (async_save and resumed == {4})
    for value in result:
        assert_same_weights(value["weights"], reference)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["checkpoint_3", "checkpoint_4"]
    # result.checkpoints: the saves of the last attempt (after the restart), each with how it was written
    shown = result.checkpoints
    assert [Path(c["path"]).name for c in shown][-2:] == ["checkpoint_3", "checkpoint_4"], shown
    assert all(c["background"] is async_save and c["total_s"] >= c["blocked_s"] >= 0 for c in shown), shown


def test_without_a_restart_the_killed_save_is_not_the_latest(tmp_path):
    """The kill alone: the hidden folder is left, checkpoint_0 is the newest and loads."""
    with pytest.raises(WorkerError):
        notebook_launch(kill_during_write, args=(str(tmp_path), 1, 0), num_processes=2, quiet=True)
    assert naming.latest_checkpoint(str(tmp_path)).name == "checkpoint_0"
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["checkpoint_0"]
    assert (tmp_path / ".checkpoint_1.partial").is_dir()  # the write that was cut off
    loaded = torch.load(tmp_path / "checkpoints" / "checkpoint_0" / "optimizer.bin", weights_only=True)
    assert set(loaded["state"]) == {0, 1}


def test_a_failed_background_write_is_raised_on_every_rank_and_not_published(tmp_path):
    """Rank 1's write fails (a full disk): no rank publishes checkpoint_1 and the failure reaches the
    caller (end_training() raises it; rank 0 hears of it through the all-reduce instead of waiting)."""
    with pytest.raises(WorkerError) as error:
        notebook_launch(
            kill_during_write,
            args=(str(tmp_path), 1, 0),
            kwargs=dict(how="raise"),
            num_processes=2,
            quiet=True,
        )
    said = str(error.value) + "".join(str(f) for f in getattr(error.value, "failures", []))
    assert "failed in its background thread" in said
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["checkpoint_0"]


def test_async_save_settings_are_checked():
    from notebook_launcher.utils import ProjectConfiguration

    with pytest.raises(ConfigError, match="async_save='yes' must be True or False"):
        ProjectConfiguration(async_save="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="save_every_n_steps=0 must be a whole number >= 1"):
        ProjectConfiguration(save_every_n_steps=0)
    for bad in (0, -1.5, "30", True, float("nan")):
        with pytest.raises(ConfigError, match="save_every_n_minutes=.* must be a number of minutes > 0"):
            ProjectConfiguration(save_every_n_minutes=bad)  # type: ignore[arg-type]
    assert ProjectConfiguration(save_every_n_minutes=0.5).save_every_n_minutes == 0.5


@pytest.mark.slow  # DeepSpeed's import and engine: ~25 s here
def test_deepspeed_refuses_async_save_saying_why(tmp_path):
    pytest.importorskip("deepspeed")
    (said, _) = notebook_launch(
        async_save_under_deepspeed,
        args=(str(tmp_path),),
        num_processes=2,
        quiet=True,
        distributed_type="DEEPSPEED",
        deepspeed_config={"zero_stage": 2},
    )
    assert "async_save=True) is not supported with DeepSpeedStrategy" in said
    assert "Use save_state() (async_save=False" in said
    assert not (tmp_path / "checkpoints").exists()  # refused before anything was written
