"""notebook_launch on the real local SLURM (scripts/slurm/start.sh: munge, slurmctld, slurmd; one
node, 2 CPUs), submitted with submitit: every rank's value, live output from the job's log files,
metrics, the same training as a local launch, WorkerError with the failing rank, Stop -> scancel,
a failing setup line, and preemption -> requeue -> resume from the latest checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from cluster_trainers import (
    alive,
    all_reduce_and_train,
    background_save_seen,
    checkpointed_steps,
    failing_rank_error,
    preemptible_steps,
    recorded_pids,
    run_forever,
)
from kernel_session import KernelSession
from slurm_support import local_slurm, slurm_jobs

from notebook_launcher import (
    LaunchStopped,
    LaunchTimeout,
    SlurmCluster,
    WorkerError,
    notebook_launch,
    start_launch,
)
from notebook_launcher.clusters.slurm import job_state

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def slurm():
    pytest.importorskip(
        "submitit", reason="submitit is not installed (pip install submitit; it is in the test extra)"
    )
    local_slurm()


@pytest.fixture
def where(slurm, tmp_path):
    return SlurmCluster(time=10, folder=str(tmp_path / "jobs"), job_name="nl-test")


def test_every_rank_returns_and_trains_like_a_local_launch(where, tmp_path, capsys):
    result = notebook_launch(
        all_reduce_and_train, kwargs={"folder": str(tmp_path)}, num_processes=2, cluster=where
    )
    printed = capsys.readouterr().out
    local = notebook_launch(all_reduce_and_train, num_processes=2, quiet=True)

    assert [value["rank"] for value in result] == [0, 1]
    assert all(value["world"] == 2 and value["sum"] == 3.0 for value in result)
    # Same processes, kernels and reduction order as the local launch: equal bit for bit.
    assert [value["losses"] for value in result] == [value["losses"] for value in local]
    assert torch.equal(result[0]["weights"], local[0]["weights"])
    assert "rank 1 of 2: sum 3.0" in result.logs[1]
    assert "[rank1] rank 1 of 2: sum 3.0" in printed  # followed from the job's log file, live
    assert "SLURM job" in printed and "submitted" in printed
    assert sorted(row["rank"] for row in result.metrics) == [0] * 4 + [1] * 4
    assert result.start_method == "slurm"
    log_files = list((tmp_path / "jobs").glob("*/*_0_log.out"))
    assert log_files and "[rank0] rank 0 of 2" in log_files[0].read_text()
    assert alive(recorded_pids(str(tmp_path))) == set()
    assert slurm_jobs("nl-test") == []


def test_a_background_save_is_shown_in_flight_then_complete_as_in_a_local_launch(where, tmp_path):
    """Issue 36 through the job's events file: the same as tests/test_ray.py's test."""
    background_save_seen(where, str(tmp_path))


def test_a_killed_kernel_ends_its_job(slurm, tmp_path):
    """SLURM keeps a job after its submitter is gone; ours ends with the kernel that started it
    (slurm_owner.py): the kernel is SIGKILLed (the OOM killer's way) while the ranks run."""
    session = KernelSession(cwd=str(tmp_path))
    try:
        run = session.run(
            f"import os, sys; sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
            "os.environ['NOTEBOOK_LAUNCHER_SLURM_OWNER_TIMEOUT'] = '3'\n"
            "from cluster_trainers import run_forever\n"
            "from notebook_launcher import SlurmCluster, start_launch\n"
            f"where = SlurmCluster(time=10, folder={str(tmp_path / 'jobs')!r}, job_name='nl-orphan')\n"
            f"handle = start_launch(run_forever, kwargs={{'folder': {str(tmp_path)!r}}}, num_processes=2, "
            "cluster=where, quiet=True, view=False)"
        )
        assert run.error is None, run.text
        deadline = time.monotonic() + 120
        while len(list(tmp_path.glob("pids-*"))) < 2:
            assert time.monotonic() < deadline, "the ranks did not start"
            time.sleep(0.2)
        os.kill(session.pid, signal.SIGKILL)
        assert alive(recorded_pids(str(tmp_path)), wait=30) == set()
        deadline = time.monotonic() + 30
        while slurm_jobs("nl-orphan") and time.monotonic() < deadline:
            time.sleep(0.5)
        assert slurm_jobs("nl-orphan") == []
        notes = "".join(path.read_text() for path in (tmp_path / "jobs").glob("*/*_events.jsonl"))
        assert "stopped watching it" in notes  # the job's own record says why it ended
    finally:
        session.kc.stop_channels()
        session.km.shutdown_kernel(now=True)


def test_a_failing_rank_raises_worker_error(where, tmp_path):
    error = failing_rank_error(where, str(tmp_path))
    assert error.rank == 1 and error.exc_type == "ValueError"
    assert "boom on rank one" in error.traceback and "fail_on_rank_one" in error.traceback
    assert alive(recorded_pids(str(tmp_path))) == set()


def test_stop_cancels_the_job(where, tmp_path):
    handle = start_launch(
        run_forever, kwargs={"folder": str(tmp_path)}, num_processes=2, cluster=where, quiet=True
    )
    _wait_for_pids(tmp_path, handle)
    job = _job_id(tmp_path)
    handle.stop()
    with pytest.raises(LaunchStopped):
        handle.wait(120)
    assert job_state(job) in (None, "CANCELLED")  # scancel, and the launch waited for SLURM to end it
    assert alive(recorded_pids(str(tmp_path))) == set()


def test_a_timeout_shows_where_each_rank_was(where, tmp_path):
    # SLURM's own signals are blocked in the workers (the node task passes them on): the stack-dump
    # request must not be one of them, or every rank's stack would come back empty.
    # The timeout must fall after the ranks are in run_forever: on 2 loaded cores a job's ranks took
    # more than 10 s to get there, so it is set from a floor measured here, the time this cluster
    # takes from the call to every rank running a function (the job's queue time included).
    started = time.monotonic()
    notebook_launch(_rank_is_running, num_processes=2, cluster=where, quiet=True)
    floor = time.monotonic() - started
    with pytest.raises(LaunchTimeout) as caught:
        notebook_launch(
            run_forever,
            kwargs={"folder": str(tmp_path)},
            num_processes=2,
            cluster=where,
            quiet=True,
            timeout=10 + 2 * floor,
        )
    stacks = caught.value.stacks
    assert sorted(stacks) == [0, 1], stacks
    assert all("run_forever" in stacks[rank] for rank in (0, 1)), stacks
    assert alive(recorded_pids(str(tmp_path))) == set()


def _rank_is_running():
    from notebook_launcher import Accelerator

    return Accelerator().process_index


def test_a_setup_line_that_fails_is_reported(slurm, tmp_path):
    where = SlurmCluster(
        time=5, folder=str(tmp_path / "jobs"), setup=["echo setting up; exit 3"], job_name="nl-test"
    )
    with pytest.raises(WorkerError) as caught:
        notebook_launch(all_reduce_and_train, num_processes=2, cluster=where, quiet=True)
    assert caught.value.exc_type == "ClusterNodeError"
    assert "before node 0 reported" in str(caught.value)


def test_preemption_requeues_and_resumes_from_the_latest_checkpoint(slurm, tmp_path, capsys):
    """SIGTERM then USR2 to the job, as SLURM sends before preempting it (submitit's own test hook
    does the same): submitit requeues the launch and the function resumes from its checkpoint. This
    function never checks accelerator.preempted: it is stopped after the grace period (2 s here)."""
    where = SlurmCluster(
        time=10,
        folder=str(tmp_path / "jobs"),
        job_name="nl-test",
        setup=["export NOTEBOOK_LAUNCHER_SLURM_GRACE_SECONDS=2"],
    )
    checkpoints = tmp_path / "run"
    handle = start_launch(checkpointed_steps, args=(str(checkpoints),), num_processes=2, cluster=where)
    _wait_for_checkpoints(handle, checkpoints, 3)
    _preempt(_job_id(tmp_path))
    result = handle.wait(300)
    printed = capsys.readouterr().out
    reference = notebook_launch(
        checkpointed_steps, args=(str(tmp_path / "ref"),), num_processes=2, quiet=True
    )

    started, restarts, weights = result[0]
    assert restarts == "1" and started >= 3  # the second run began where the checkpoints ended
    # Each step starts from a saved state and computes the same thing: the resumed run ends with
    # the weights of an uninterrupted one, bit for bit.
    assert torch.equal(weights, reference[0][2])
    assert "requeued by submitit" in printed and "requeue 1" in printed
    assert "the ranks were stopped (the function did not return on accelerator.preempted)" in printed
    assert slurm_jobs("nl-test") == []


def test_a_loop_that_checks_preempted_saves_at_the_signal_and_resumes_there(where, tmp_path, capsys):
    """The same signals, and a loop that checks accelerator.preempted: every rank stops after the
    same step and saves, the job is requeued, and the requeued launch resumes from that checkpoint."""
    run = tmp_path / "run"
    handle = start_launch(preemptible_steps, args=(str(run),), num_processes=2, cluster=where)
    _wait_for_checkpoints(handle, run, 1)  # a periodic one (step 5)
    before = {path.name for path in (run / "checkpoints").glob("checkpoint_*")}
    _preempt(_job_id(tmp_path))
    result = handle.wait(300)
    printed = capsys.readouterr().out
    reference = notebook_launch(preemptible_steps, args=(str(tmp_path / "ref"),), num_processes=2, quiet=True)

    marked = [path for path in (run / "checkpoints").glob("checkpoint_*") if (path / "preempted").exists()]
    # Saved on preemption, after the signal: a checkpoint that did not exist when the signals were
    # sent, written only when accelerator.preempted was true.
    assert len(marked) == 1 and marked[0].name not in before
    preempted_at = int((marked[0] / "preempted").read_text())
    started, restarts, weights = result[0]
    assert restarts == "1" and started == preempted_at < 30  # resumed from the preemption's checkpoint
    # Every step starts from saved state and computes the same thing: the weights of an uninterrupted
    # run, bit for bit.
    assert torch.equal(weights, reference[0][2])
    assert "every rank stopped after the same step (accelerator.preempted) and saved" in printed
    assert "requeued by submitit" in printed and "requeue 1" in printed
    assert slurm_jobs("nl-test") == []


def _wait_for_checkpoints(handle, project, count: int, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while len(list((project / "checkpoints").glob("checkpoint_*"))) < count:
        assert not handle.done and time.monotonic() < deadline, "no checkpoint was written"
        time.sleep(0.2)


def _preempt(job: str) -> None:
    """What SLURM sends before preempting a job: SIGTERM, then submitit's USR2. The requeued job
    waits the local SLURM's cred_expire (10 s, scripts/slurm/start.sh) before it starts again, as any
    SLURM holds one (120 s by default): a credential made in the same second as the old one's
    revocation is refused ("Job credential revoked", the job ends FAILED), so it is never started early."""
    for sig in ("TERM", "USR2"):
        subprocess.run(["scancel", f"--signal={sig}", job], check=True)


def _wait_for_pids(folder, handle=None, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while len(list(folder.glob("pids-*"))) < 2:
        if handle is not None and handle.done:
            handle.wait()
        assert time.monotonic() < deadline, "the ranks did not start"
        time.sleep(0.2)


def _job_id(tmp_path) -> str:
    folders = [p.name for p in (tmp_path / "jobs").iterdir() if p.is_dir() and p.name.isdigit()]
    assert len(folders) == 1
    return folders[0]
