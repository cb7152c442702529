"""The warm pool (issue 15): launches that cannot fork the kernel run on workers forked ahead of
time from a forkserver with torch preloaded — and never with stale state."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
from live_processes import live_children, pid_is_live

from notebook_launcher import WorkerError, notebook_launch
from notebook_launcher.launch.warm import pool as pool_module
from notebook_launcher.launch.warm.pool import release_warm_pool, warm_pool

pytestmark = (
    pytest.mark.slow
)  # each test starts a forkserver that imports torch (~3 s, more on a busy machine)


def what_a_worker_sees(tag):
    import random

    import numpy
    import torch

    from notebook_launcher import Accelerator

    acc = Accelerator()
    acc.wait_for_everyone()
    return {
        "tag": tag,
        "pid": os.getpid(),
        "rank": acc.process_index,
        "mixed_precision": acc.mixed_precision,
        "accumulation": acc.gradient_accumulation_steps,
        "flag": os.environ.get("WARM_POOL_FLAG"),
        "threads": torch.get_num_threads(),
        "cwd": os.getcwd(),
        "extra_path": [p for p in sys.path if p.endswith("warm-extra")],
        "random": random.random(),
        "numpy": float(numpy.random.random()),
        "torch_seed": torch.initial_seed(),
    }


def fails_on_rank_one():
    import torch.distributed as dist

    from notebook_launcher import Accelerator

    Accelerator()
    if dist.get_rank() == 1:
        raise ValueError("rank one fails")
    return "ok"


def _launch(tag, **options):
    result = notebook_launch(
        what_a_worker_sees, args=(tag,), num_processes=2, start_method="forkserver", quiet=True, **options
    )
    return list(result)


def _settings(seen: dict) -> tuple:
    return seen["mixed_precision"], seen["accumulation"], seen["flag"], seen["threads"], seen["cwd"]


def test_two_warm_launches_with_different_settings_each_see_their_own(tmp_path, monkeypatch):
    first_dir, second_dir = tmp_path / "one", tmp_path / "two"
    first_dir.mkdir(), second_dir.mkdir()
    monkeypatch.chdir(first_dir)
    monkeypatch.setenv("WARM_POOL_FLAG", "first")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    first = _launch("first", mixed_precision="bf16", gradient_accumulation_steps=2)
    warm_pool().settle()  # the refill runs in the background once a launch has returned
    waiting = {w.process.pid for w in warm_pool()._waiting}
    assert len(waiting) == 2  # the next launch's workers, forked and waiting

    monkeypatch.chdir(second_dir)
    monkeypatch.setenv("WARM_POOL_FLAG", "second")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.syspath_prepend(str(tmp_path / "warm-extra"))
    second = _launch("second", gradient_accumulation_steps=3)

    assert {r["pid"] for r in second} == waiting  # run by the workers that were waiting: warm
    for seen in first:
        assert _settings(seen) == ("bf16", 2, "first", 1, str(first_dir)) and seen["extra_path"] == []
    for seen in second:  # its workers were forked while the first launch's settings were in place
        assert _settings(seen) == ("no", 3, "second", 2, str(second_dir))
        assert seen["extra_path"] == [str(tmp_path / "warm-extra")]
    # Fresh generators in every worker of every launch, as in newly spawned processes (forks of one
    # server would otherwise all draw the same numbers, launch after launch).
    draws = [(r["random"], r["numpy"], r["torch_seed"]) for r in first + second]
    assert len({d[0] for d in draws}) == len({d[1] for d in draws}) == len({d[2] for d in draws}) == 4
    # A launch that fails on warm workers leaves the pool working for the next one.
    with pytest.raises(WorkerError) as failure:
        notebook_launch(fails_on_rank_one, num_processes=2, start_method="forkserver", quiet=True)
    assert failure.value.rank == 1 and "rank one fails" in failure.value.traceback
    assert [r["tag"] for r in _launch("after the failure")] == ["after the failure"] * 2


def _pool_processes() -> list[psutil.Process]:
    return live_children()


def _wait_no_pool(seconds: float = 15) -> None:
    deadline = time.monotonic() + seconds
    while _pool_processes() and time.monotonic() < deadline:
        time.sleep(0.1)


def _pipes_opened_since(fds_before: set[str]) -> list[str]:
    """The pipes this process holds that it did not hold before (the pool's pipes to its workers and
    the forkserver's liveness pipe). Only pipes: a thread of an earlier test (a tracker's uploader)
    may open a file or a socket at any moment, which says nothing about the pool (seen on CI)."""
    opened = []
    for fd in set(os.listdir("/proc/self/fd")) - fds_before:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed meanwhile (listdir's own descriptor, for one)
        if target.startswith("pipe:"):
            opened.append(f"{fd} -> {target}")
    return opened


def test_the_pool_is_bounded_and_released_on_request_or_when_idle(monkeypatch):
    release_warm_pool()
    fds_before = set(os.listdir("/proc/self/fd"))
    _launch("a")
    warm_pool().settle()
    assert warm_pool().waiting == 2
    kept = _pool_processes()
    # the forkserver, its resource tracker and the 2 waiting workers (nothing per launch accumulates)
    assert 3 <= len(kept) <= 4, [" ".join(p.cmdline())[-80:] for p in kept]
    _launch("b")
    _launch("c")
    warm_pool().settle()
    assert warm_pool().waiting == 2 and len(_pool_processes()) == len(kept)
    release_warm_pool()
    _wait_no_pool()
    assert _pool_processes() == []
    assert _pipes_opened_since(fds_before) == []
    monkeypatch.setattr(pool_module, "IDLE_SECONDS", 0.5)
    assert _launch("after release")[0]["tag"] == "after release"  # comes back on demand ...
    assert _pool_processes()
    _wait_no_pool()  # ... and goes away by itself after IDLE_SECONDS without a launch
    assert _pool_processes() == [] and warm_pool().waiting == 0


SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    import psutil
    from notebook_launcher import notebook_launch
    from notebook_launcher.launch.warm.pool import warm_pool
    def pid():
        return os.getpid()
    if __name__ == "__main__":
        notebook_launch(pid, num_processes=2, start_method="forkserver", quiet=True)
        warm_pool().settle()  # the next launch's workers are forked in the background
        print("POOL", " ".join(str(p.pid) for p in psutil.Process().children(recursive=True)), flush=True)
        if sys.argv[1] == "hang":
            time.sleep(600)
    """
)


def _start_a_python_with_the_servers_modules() -> subprocess.Popen:
    """A Python that loads what the pool's server loads, then waits for its stdin to close: closed, it
    ends the normal way (atexit work, then every module torn down), as the server used to."""
    code = "import sys, notebook_launcher.launch.warm.preload; print('loaded', flush=True); sys.stdin.read()"
    return subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


@pytest.mark.parametrize("how", ["exit", "killed"])
def test_the_pool_ends_with_its_process(tmp_path, how):
    """At interpreter exit (a kernel shutting down) atexit releases it; a killed process takes it
    along at once: in less than half the time a Python with the same modules takes to end normally,
    told to end at the same moment, under the same load (the server skips that teardown,
    server_exit.py; with it, a killed kernel's ranks ran on for 4 to 10 s)."""
    script = tmp_path / "pool_script.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    floor = _start_a_python_with_the_servers_modules() if how == "killed" else None
    proc = subprocess.Popen(
        [sys.executable, str(script), "hang" if how == "killed" else "exit"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    line = proc.stdout.readline()
    pids = [int(p) for p in line.split()[1:]]
    assert len(pids) >= 3, line
    if floor is not None:
        assert floor.stdout.readline() == "loaded\n"
    ended_at = time.monotonic()
    if how == "killed":
        os.kill(proc.pid, signal.SIGKILL)
        floor.stdin.close()  # it ends the normal way, from now, beside the pool
    gone: dict[str, float] = {}
    deadline = ended_at + 15
    while time.monotonic() < deadline:
        now = time.monotonic() - ended_at
        for pid in pids:
            if str(pid) not in gone and not pid_is_live(pid):
                gone[str(pid)] = now
        if floor is not None and "floor" not in gone and floor.poll() is not None:
            gone["floor"] = now
        if "its process" not in gone and proc.poll() is not None:
            gone["its process"] = now
        if len(gone) == len(pids) + 1 + (floor is not None):
            break
        time.sleep(0.01)
    proc.wait(timeout=60)
    proc.stdout.close()
    alive = [pid for pid in pids if str(pid) not in gone]
    assert alive == [], f"pool processes outlived their parent ({how})"
    if floor is not None:
        floor.stdout.close()
        # From the end of the killed process (Linux frees its memory before it closes its files, so
        # the server learns of the death only then, later under load) to the pool's end.
        pool_gone = max(gone[str(pid)] for pid in pids) - gone["its process"]
        assert pool_gone < gone["floor"] / 2, (
            f"the pool took {pool_gone:.2f} s to end after its process had ended; a Python with the same "
            f"modules, told to end at the moment of the kill, took {gone['floor']:.2f} s: the server tore its "
            f"modules down (seconds after the kill, per process: {gone})"
        )
