"""Graceful preemption under `notebook-launcher launch`: SIGTERM (a scheduler about to preempt) or
SIGUSR1 (SLURM's warning before a time limit) sent to the launcher reaches every worker through
torchrun's agent; the workers' Accelerator turns it into `accelerator.preempted` after the same step
on every rank, the loop saves its state and returns, and the launcher says it was preempted.
"""

from __future__ import annotations

import os
import re
import signal
import time

import pytest
from test_cli_helpers import cli_env, explain, finish, start_cli

pytestmark = pytest.mark.slow  # ~10 s each: torchrun starts two workers that import torch

SCRIPT = """
import os, time
import torch
from notebook_launcher import Accelerator
from notebook_launcher.utils import ProjectConfiguration

acc = Accelerator(project_config=ProjectConfiguration(project_dir={project!r}, automatic_checkpoint_naming=True))
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
model, optimizer = acc.prepare(model, optimizer)
for step in range(100_000):
    acc.backward(model(torch.ones(2, 4)).sum())
    optimizer.step()
    optimizer.zero_grad()
    if step == 3:
        open(os.path.join({folder!r}, f"ready{{acc.process_index}}"), "w").close()
    if acc.preempted:
        acc.save_state()
        print(f"PREEMPTED at step {{step}}", flush=True)
        break
    time.sleep(0.02)
else:
    print("NEVER PREEMPTED", flush=True)
"""


def _start(tmp_path, script: str):
    (tmp_path / "train.py").write_text(script.format(project=str(tmp_path / "project"), folder=str(tmp_path)))
    env = cli_env(tmp_path, NOTEBOOK_LAUNCHER_PREEMPTION_CHECK_SECONDS="0")
    proc = start_cli(["launch", "--num_processes", "2", "--cpu", "train.py"], cwd=tmp_path, env=env)
    deadline = time.monotonic() + 90
    while not all((tmp_path / f"ready{rank}").exists() for rank in range(2)):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(explain(finish(proc, timeout=5)))
        time.sleep(0.05)
    return proc


@pytest.mark.parametrize("signum", [signal.SIGUSR1, signal.SIGTERM], ids=["SIGUSR1", "SIGTERM"])
def test_a_signal_to_the_launcher_stops_every_rank_after_the_same_step_and_saves(tmp_path, signum):
    proc = _start(tmp_path, SCRIPT)
    os.kill(proc.pid, signum)
    result = finish(proc, timeout=60)
    steps = {
        int(rank): int(step)
        for rank, step in re.findall(r"\[rank(\d)\] PREEMPTED at step (\d+)", result.stdout)
    }
    assert sorted(steps) == [0, 1] and steps[0] == steps[1], explain(result)
    assert steps[0] >= 3 and "NEVER PREEMPTED" not in result.stdout
    saved = tmp_path / "project" / "checkpoints" / "checkpoint_0"
    assert saved.is_dir() and any(saved.iterdir()), explain(result)
    assert result.returncode == 128 + signum, explain(result)
    assert f"preempted by {signal.Signals(signum).name}" in result.stderr, explain(result)


WORKER = """
import os, signal, sys, time
from notebook_launcher import Accelerator
from notebook_launcher.runtime.world import preemption

asked = os.environ.get("NOTEBOOK_LAUNCHER_GRACEFUL_PREEMPTION") == "1"
Accelerator()
if not asked:  # a plain script: the Accelerator leaves the signals alone
    print(signal.getsignal(signal.SIGTERM) == signal.SIG_DFL, flush=True)
    sys.exit(0)
child = os.fork()
if child == 0:  # what a worker starts (a DataLoader worker): the handler came along, but nobody checks here
    time.sleep(30)
    os._exit(0)
time.sleep(0.2)
os.kill(child, signal.SIGTERM)
_, status = os.waitpid(child, 0)
os.kill(os.getpid(), signal.SIGTERM)  # the worker itself: only a request
print(os.WTERMSIG(status) if os.WIFSIGNALED(status) else "exited", preemption.requested(), flush=True)
"""


@pytest.mark.parametrize("asked", [True, False], ids=["cli-worker", "plain-script"])
def test_only_the_worker_itself_turns_the_signal_into_a_request(tmp_path, asked):
    import subprocess
    import sys

    env = cli_env(tmp_path, **({"NOTEBOOK_LAUNCHER_GRACEFUL_PREEMPTION": "1"} if asked else {}))
    out = subprocess.run([sys.executable, "-c", WORKER], env=env, capture_output=True, text=True, timeout=60)
    expected = [str(int(signal.SIGTERM)), "True"] if asked else ["True"]
    assert out.stdout.split() == expected, out.stderr
