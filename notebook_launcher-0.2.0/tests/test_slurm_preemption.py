"""The node task's preemption handling without SLURM (test_slurm.py runs it on the real one): SLURM's
signals become one request to the workers, a grace period stops a loop that does not return, and
the requeue goes to submitit's handler only once its signal came."""

from __future__ import annotations

import os
import signal
import time

import pytest

from notebook_launcher.clusters.slurm_preemption import REQUEST_SIGNAL, SlurmPreemption


@pytest.fixture
def submitit_handler(monkeypatch):
    """What submitit sets before the task runs: its handler for USR2 (the requeue)."""
    monkeypatch.setenv("NOTEBOOK_LAUNCHER_SLURM_GRACE_SECONDS", "0.3")
    calls: list[int] = []
    previous = signal.signal(signal.SIGUSR2, lambda signum, _frame: calls.append(signum))
    yield calls
    signal.signal(signal.SIGUSR2, previous)


def test_the_signals_ask_the_workers_once_and_the_requeue_goes_to_submitit(submitit_handler):
    requests, stops = [], []
    with pytest.raises(SystemExit), SlurmPreemption(requests.append, lambda: stops.append(1)) as preemption:
        for name in ("SIGTERM", "SIGUSR2"):
            os.kill(os.getpid(), getattr(signal, name))
        assert preemption.received == ["SIGTERM", "SIGUSR2"]
        assert requests == [REQUEST_SIGNAL]  # once: a second request would end a worker at once
        assert submitit_handler == []  # not before the ranks are done
        preemption.requeue()
    assert submitit_handler == [signal.SIGUSR2]
    time.sleep(0.5)
    assert stops == []  # the grace period ended with the context


def test_a_loop_that_does_not_return_is_stopped_after_the_grace_period(submitit_handler):
    stops = []
    with SlurmPreemption(lambda _signum: None, lambda: stops.append(time.monotonic())):
        asked = time.monotonic()
        os.kill(os.getpid(), signal.SIGUSR2)
        while not stops and time.monotonic() - asked < 10:
            time.sleep(0.05)
    assert stops and stops[0] - asked >= 0.3


def test_sigterm_alone_requeues_nothing(submitit_handler):
    with SlurmPreemption(lambda _signum: None, lambda: None) as preemption:
        os.kill(os.getpid(), signal.SIGTERM)
        preemption.requeue()  # waits out the grace period for submitit's signal, then returns
    assert submitit_handler == []
    assert signal.getsignal(signal.SIGTERM) != preemption._on_signal  # handlers put back


BLOCKED_WORKER = """
import os, signal, sys
from notebook_launcher.clusters.slurm_preemption import REQUEST_SIGNAL
from notebook_launcher.runtime.world import preemption

# what a SLURM node task's worker inherits: the scheduler's signals blocked (submitit told to use USR1)
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGUSR1})
preemption.install_handlers()
preemption.listen()
os.kill(os.getpid(), REQUEST_SIGNAL)
print(preemption.requested(), flush=True)
"""


def test_the_request_reaches_a_worker_whatever_the_scheduler_blocked():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", BLOCKED_WORKER], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["True"], out.stderr
