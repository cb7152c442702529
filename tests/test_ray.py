"""notebook_launch on a real Ray cluster started by the test (`ray start --head`, 2 CPUs, on this
host), connected to by address: every rank's value, live output, logs, metrics, the same training
as a local launch, WorkerError with the failing rank, Stop and Ctrl-C — and nothing of the launch
left running on the cluster afterwards."""

from __future__ import annotations

import _thread
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import torch
from cluster_trainers import (
    alive,
    all_reduce_and_train,
    background_save_seen,
    failing_rank_error,
    recorded_pids,
    run_forever,
)
from kernel_session import KernelSession
from live_processes import live_children
from ray_support import shared_ray_cluster  # noqa: F401  (fixture `ray_cluster`: one Ray cluster for the Ray tests)

from notebook_launcher import LaunchStopped, RayCluster, notebook_launch, start_launch

pytestmark = pytest.mark.slow


@pytest.fixture
def where(ray_cluster):
    return RayCluster(address=ray_cluster.address)


# The native threads Ray's client leaves in a process after ray.shutdown() (gRPC's event engine, its
# timers, its DNS resolver, the GCS client's I/O); the launch's Ray driver runs in its own process.
RAY_CLIENT_THREADS = {
    "event_engine",
    "timer_manager",
    "grpc_global_tim",
    "gcs_client_io_s",
    "resolver-execut",
}


def _thread_names() -> list[str]:
    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            names.append(Path(f"/proc/self/task/{task}/comm").read_text().strip())
        except OSError:
            pass  # ended meanwhile
    return names


def test_every_rank_returns_and_trains_like_a_local_launch(where, tmp_path, capsys):
    environ, handlers = dict(os.environ), {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    result = notebook_launch(
        all_reduce_and_train, kwargs={"folder": str(tmp_path)}, num_processes=2, cluster=where
    )
    printed = capsys.readouterr().out
    assert dict(os.environ) == environ  # the caller is left as it was
    assert {s: signal.getsignal(s) for s in handlers} == handlers
    assert not RAY_CLIENT_THREADS & set(_thread_names()), _thread_names()  # no thread of Ray's either
    local = notebook_launch(all_reduce_and_train, num_processes=2, quiet=True)

    assert [value["rank"] for value in result] == [0, 1]
    assert all(value["world"] == 2 and value["sum"] == 3.0 for value in result)  # 1 + 2 over the world
    # The same processes, kernels and reduction order as the local launch: the arithmetic is
    # identical, so losses and weights are equal bit for bit (no tolerance needed).
    assert [value["losses"] for value in result] == [value["losses"] for value in local]
    assert torch.equal(result[0]["weights"], local[0]["weights"])
    assert torch.equal(result[0]["weights"], result[1]["weights"])
    assert "rank 1 of 2: sum 3.0" in result.logs[1]
    assert "[rank1] rank 1 of 2: sum 3.0" in printed  # live in the cell, with the rank prefix
    assert sorted(row["rank"] for row in result.metrics) == [0] * 4 + [1] * 4  # 64 rows / (2 ranks x 8)
    assert result.start_method == "ray" and result.world_size == 2
    assert alive(recorded_pids(str(tmp_path))) == set()  # workers, node launcher and actor are gone


def test_a_failing_rank_raises_worker_error_and_leaves_nothing(where, tmp_path):
    error = failing_rank_error(where, str(tmp_path))
    assert error.rank == 1 and error.exc_type == "ValueError"
    assert "boom on rank one" in error.traceback and "fail_on_rank_one" in error.traceback
    assert isinstance(error.exception, ValueError)
    pids = recorded_pids(str(tmp_path))
    assert len(pids) >= 4 and alive(pids) == set()


def test_stop_ends_every_rank_on_the_cluster(where, tmp_path):
    handle = start_launch(
        run_forever, kwargs={"folder": str(tmp_path)}, num_processes=2, cluster=where, quiet=True
    )
    _wait_for_pids(tmp_path, handle)
    stopped_at = time.monotonic()
    handle.stop()
    with pytest.raises(LaunchStopped):
        handle.wait(120)
    assert alive(recorded_pids(str(tmp_path)), wait=0) == set()
    print(f"Ray: Stop to everything gone: {time.monotonic() - stopped_at:.1f} s")


def test_ctrl_c_ends_every_rank_on_the_cluster(where, tmp_path, sigint_raises_keyboard_interrupt):
    def interrupt_when_running():
        _wait_for_pids(tmp_path)
        _thread.interrupt_main()

    threading.Thread(target=interrupt_when_running, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        notebook_launch(
            run_forever, kwargs={"folder": str(tmp_path)}, num_processes=2, cluster=where, quiet=True
        )
    assert alive(recorded_pids(str(tmp_path))) == set()


def test_a_background_save_is_shown_in_flight_then_complete_as_in_a_local_launch(where, tmp_path):
    """Issue 36 on a cluster: each rank's background write reaches the notebook, the RunView shows the
    save in flight per rank, then the last complete checkpoint; result.checkpoints names it."""
    background_save_seen(where, str(tmp_path))


def test_a_killed_kernel_takes_its_ray_ranks_with_it(ray_cluster, tmp_path):
    """The kernel that started a cluster launch is SIGKILLed (the OOM killer's way): Ray sees its
    driver die and ends the launch's actors, their ranks and its placement group (the next test
    checks the CPUs came back)."""
    session = KernelSession(cwd=str(tmp_path))
    try:
        run = session.run(
            f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
            "from cluster_trainers import run_forever\n"
            "from notebook_launcher import RayCluster, start_launch\n"
            f"handle = start_launch(run_forever, kwargs={{'folder': {str(tmp_path)!r}}}, num_processes=2, "
            f"cluster=RayCluster(address={ray_cluster.address!r}), quiet=True, view=False)"
        )
        assert run.error is None, run.text
        _wait_for_pids(tmp_path)
        os.kill(session.pid, signal.SIGKILL)
        assert alive(recorded_pids(str(tmp_path)), wait=30) == set()
    finally:
        session.kc.stop_channels()
        session.km.shutdown_kernel(now=True)


def test_a_killed_ray_driver_fails_the_launch_with_its_cause_and_leaves_nothing(where, tmp_path):
    """The launch's Ray driver process dies (SIGKILL: an OOM killer): the launch raises, naming that
    process, what it was doing and its exit status, instead of waiting forever; Ray ends the driver's
    actors, and with them the ranks."""
    handle = start_launch(
        run_forever, kwargs={"folder": str(tmp_path)}, num_processes=2, cluster=where, quiet=True
    )
    _wait_for_pids(tmp_path, handle)
    drivers = [p.pid for p in live_children() if "notebook_launcher.clusters.ray_driver" in _cmdline(p)]
    assert len(drivers) == 1, drivers
    os.kill(drivers[0], signal.SIGKILL)
    with pytest.raises(RuntimeError, match=r"Ray driver process .* ended while .* exit code -9"):
        handle.wait(120)
    assert alive(recorded_pids(str(tmp_path)), wait=30) == set()


def _cmdline(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.NoSuchProcess:
        return ""  # ended meanwhile


def test_the_cluster_has_all_its_cpus_back(ray_cluster):
    """No placement group or actor of the launches above still holds resources. Asked from a process
    of its own: a ray.init() here would leave Ray's client threads in this test process."""
    script = (
        "import sys, time, ray\n"
        f"ray.init(address={ray_cluster.address!r}, log_to_driver=False)\n"
        "deadline = time.monotonic() + 30\n"
        "while ray.available_resources().get('CPU', 0) < 2 and time.monotonic() < deadline:\n"
        "    time.sleep(0.5)\n"
        "print('CPU', ray.available_resources().get('CPU'))\n"
        "ray.shutdown()\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "CPU 2.0" in done.stdout.splitlines(), done.stdout + done.stderr[-3000:]


def _wait_for_pids(folder, handle=None, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while len(list(folder.glob("pids-*"))) < 2:
        if handle is not None and handle.done:
            handle.wait()  # raises what went wrong
        assert time.monotonic() < deadline, "the ranks did not start"
        time.sleep(0.2)
