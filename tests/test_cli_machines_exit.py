"""A machine whose peer launcher is gone ends within the documented bound (cli/machines.py), names
the missing machine and its last known state, and exits with status 1 (issue 23, part 1).

Two `launch` invocations on 127.0.0.1 act as two machines (as in test_cli_multimachine.py). Machine
1's launcher is SIGKILLed once after its workers finished (it was waiting at the exit) and once
before (its worker still running, and ending with it); only then may machine 0's worker finish.
Both scenarios run at the same time to keep the suite's time.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from test_cli_helpers import cli_env, explain, finish, free_port, machine_args, run_cli, start_cli

from notebook_launcher.cli.machines import BEAT_SECONDS, GONE_AFTER_SECONDS

SCRIPT = """
import os, sys, time, pathlib
import torch, torch.distributed as dist
folder, machine, mode = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
dist.init_process_group("gloo")
dist.all_reduce(torch.ones(1))
dist.destroy_process_group()
(folder / f"ready{machine}").write_text("")
if machine == "1" and mode == "before":
    time.sleep(600)  # ends with its launcher (the worker's death signal)
if machine == "0":
    deadline = time.monotonic() + 300
    while not (folder / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
"""


def _launcher_floor(tmp_path) -> float:
    """How long a one-process CLI launch of an empty script takes here, now: the slack the bound
    allows machine 0 for its own teardown (a Python start, torch's import, a worker's end)."""
    folder = tmp_path / "floor"
    folder.mkdir()
    (folder / "empty.py").write_text("")
    began = time.monotonic()
    result = run_cli(["launch", "--num_processes", "1", "empty.py"], cwd=folder, timeout=120)
    assert result.returncode == 0, explain(result)
    return time.monotonic() - began


def _wait_for(path, proc, timeout=180) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None and time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.1)


@pytest.mark.slow  # ~40 s: four launchers at once, and the bound itself (15 s)
def test_machine_0_ends_within_the_bound_when_machine_1s_launcher_is_killed(tmp_path):
    teardown = 2 * _launcher_floor(tmp_path)
    runs = {}
    for mode in ("after", "before"):
        folder = tmp_path / mode
        folder.mkdir()
        (folder / "probe.py").write_text(SCRIPT)
        port, env = free_port(), cli_env(folder)
        runs[mode] = [
            start_cli(
                [*machine_args(rank, "127.0.0.1", port), "probe.py", str(folder), str(rank), mode],
                cwd=folder,
                env=env,
            )
            for rank in (0, 1)
        ]
    for mode, (_, machine1) in runs.items():
        _wait_for(tmp_path / mode / "ready1", machine1)
    time.sleep(2 * BEAT_SECONDS + 1)  # "after": machine 1's worker has exited and its launcher is at the exit
    went = time.monotonic()
    for mode, (_, machine1) in runs.items():
        os.kill(machine1.pid, signal.SIGKILL)  # the launcher only: its worker, if any, dies with it
        (tmp_path / mode / "go").write_text("")
    results = {
        mode: finish(machine0, timeout=GONE_AFTER_SECONDS + 120) for mode, (machine0, _) in runs.items()
    }
    took = time.monotonic() - went
    for _, machine1 in runs.values():
        machine1.wait(timeout=30)
    states = {
        "after": "its workers had finished, and it was waiting at the exit",
        "before": "its workers were running",
    }
    for mode, result in results.items():
        assert result.returncode == 1, explain(result)
        assert "machine 1 (host" in result.stderr and "--machine_rank 1)" in result.stderr, explain(result)
        assert f"last known state: {states[mode]}" in result.stderr, explain(result)
    assert took < GONE_AFTER_SECONDS + BEAT_SECONDS + teardown, (
        f"machine 0 took {took:.1f} s to end (bound {GONE_AFTER_SECONDS} + {BEAT_SECONDS} + 2 x {teardown / 2:.1f} s)"
    )
