"""Error paths of notebook_launch that used to lose information (issue 11, section 3): values and
metrics the notebook cannot unpickle, the worker's exception as the cause, observers that fail,
the stack dump's wait, errors that cannot be sent, and Ctrl-C during shutdown."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import warnings

import psutil
import pytest

from notebook_launcher import LaunchTimeout, WorkerError, notebook_launch
from notebook_launcher.launch.events import MetricLogged, RunStarted
from notebook_launcher.launch.supervise import supervisor as supervisor_module

WORKER_ONLY_MODULE = "class Thing:\n    def __init__(self, n):\n        self.n = n\n"


def import_worker_only_module(directory: str):
    """A module only the worker can import (written and put on sys.path there): the kernel cannot
    unpickle its objects, as with a package installed or a file written after the kernel started."""
    path = os.path.join(directory, f"worker_only_{os.getpid()}")
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "worker_only_mod.py"), "w") as fp:
        fp.write(WORKER_ONLY_MODULE)
    sys.path.insert(0, path)
    import worker_only_mod

    return worker_only_mod


def returns_something_unloadable_on_rank_one(directory):
    from notebook_launcher import Accelerator

    acc = Accelerator()
    if acc.process_index == 1:
        return import_worker_only_module(directory).Thing(1)
    return {"rank": 0, "ok": True}


def test_a_return_value_that_cannot_be_unpickled_names_the_rank_and_keeps_the_others(tmp_path):
    with pytest.raises(WorkerError) as info:
        notebook_launch(
            returns_something_unloadable_on_rank_one, args=(str(tmp_path),), num_processes=2, quiet=True
        )
    err = info.value
    assert err.rank == 1 and err.exc_type == "ModuleNotFoundError"
    assert "rank 1 returned a worker_only_mod.Thing that cannot be unpickled" in str(err)
    assert err.values == {0: {"rank": 0, "ok": True}}  # rank 0's value is not lost
    assert isinstance(err.__cause__, ModuleNotFoundError)
    assert not psutil.Process().children()


class PlannedFailure(Exception):
    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


def fails_with_a_rich_exception():
    from notebook_launcher import Accelerator

    if Accelerator().process_index == 1:
        raise PlannedFailure("bad shard", code=42)


def test_worker_error_is_chained_to_the_workers_own_exception():
    try:
        notebook_launch(fails_with_a_rich_exception, num_processes=2, quiet=True)
    except WorkerError as err:
        cause = err.__cause__
        assert isinstance(cause, PlannedFailure) and cause.code == 42 and str(cause) == "bad shard"
        assert cause is err.exception and err.__suppress_context__
        # The worker's traceback starts at the user's function, not in the launcher's worker code.
        assert err.traceback.splitlines()[1].strip().endswith("in fails_with_a_rich_exception")
        assert "launch/worker/entry.py" not in err.traceback
    else:
        pytest.fail("no WorkerError")


def logs_unloadable_metrics(directory):
    from notebook_launcher import Accelerator

    acc = Accelerator()
    thing = import_worker_only_module(directory).Thing(3)
    for step in range(3):
        acc.log({"loss": 1.0 + step, "thing": thing, "lock": threading.Lock()}, step=step)
    return "trained"


def test_metrics_that_cannot_travel_are_dropped_with_one_warning_and_the_run_goes_on(tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = notebook_launch(logs_unloadable_metrics, args=(str(tmp_path),), num_processes=1, quiet=True)
    assert list(result) == ["trained"]
    assert [(row["step"], row["loss"]) for row in result.metrics] == [(0, 1.0), (1, 2.0), (2, 3.0)]
    assert all("thing" not in row and "lock" not in row for row in result.metrics)
    # Unpickling failed here: one warning for the key, not one per row.
    dropped = [w for w in caught if "'thing'" in str(w.message)]
    assert len(dropped) == 1 and "rank 0" in str(dropped[0].message)
    # Pickling failed in the worker: one warning there, shown in the rank's output.
    assert result.logs[0].count("the value of 'lock'") == 1


def logs_reserved_keys():
    from notebook_launcher import Accelerator

    Accelerator().log({"step": 7, "time": "noon", "rank": "first", "loss": 0.5}, step=3)


@pytest.mark.parametrize("in_process", [False, True])
def test_logged_keys_named_like_the_rows_own_fields_are_kept(in_process):
    kwargs = {"in_process": True} if in_process else {"num_processes": 1, "quiet": True}
    row = notebook_launch(logs_reserved_keys, **kwargs).metrics[0]
    assert row["rank"] == 0 and row["step"] == 3 and isinstance(row["time"], float)
    assert (row["user_step"], row["user_time"], row["user_rank"], row["loss"]) == (7, "noon", "first", 0.5)


def prints_two_lines():
    print("one", flush=True)
    print("two", flush=True)


def test_an_observer_that_fails_does_not_make_the_next_one_miss_events():
    seen = []

    def broken(event):
        raise RuntimeError("observer bug")

    with pytest.warns(UserWarning, match="observer bug"):
        notebook_launch(prints_two_lines, num_processes=1, quiet=True, observers=[broken, seen.append])
    # The broken observer is detached at the very first event; the next one still gets that event.
    assert isinstance(seen[0], RunStarted)
    assert [e.text for e in seen if hasattr(e, "text")] == ["one", "two"]


class CountingSelector(supervisor_module.selectors.DefaultSelector):
    calls = 0

    def select(self, timeout=None):
        CountingSelector.calls += 1
        return super().select(timeout)


def hangs_while_rank_one_logs():
    from notebook_launcher import Accelerator

    acc = Accelerator()
    if acc.process_index == 0:
        time.sleep(60)
    for step in range(100_000):
        acc.log({"step_value": step})
        time.sleep(0.005)


def test_the_stack_dump_waits_for_the_dumps_without_spinning(monkeypatch):
    monkeypatch.setattr(supervisor_module.selectors, "DefaultSelector", CountingSelector)
    CountingSelector.calls = 0
    metrics = []
    start = time.monotonic()
    with pytest.raises(LaunchTimeout) as info:
        notebook_launch(
            hangs_while_rank_one_logs,
            num_processes=2,
            quiet=True,
            timeout=3,
            observers=[lambda e: metrics.append(e) if isinstance(e, MetricLogged) else None],
        )
    duration = time.monotonic() - start
    assert "time.sleep(60)" in info.value.stacks[0]
    # Every wait either returns something new (an output chunk or message, which is then read) or
    # times out after at least 25 ms. A wait that returns at once for a pipe nobody reads (rank 1's
    # messages during the dump) spins: thousands of calls in the dump's window, whatever the load.
    bound = 3 * len(metrics) + duration / 0.025 + 100
    assert CountingSelector.calls < bound, (CountingSelector.calls, len(metrics), duration)


def closes_its_message_pipe_then_fails():
    for fd in map(int, os.listdir("/proc/self/fd")):
        try:
            if fd > 2 and os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:"):
                os.close(fd)  # the message pipe is one of these: the error cannot be sent
        except OSError:
            pass
    raise ValueError("the traceback must still arrive")


class UnprintableError(Exception):
    def __str__(self):
        raise RuntimeError("str() is broken")


def raises_an_unprintable_error():
    raise UnprintableError()


def test_an_error_that_cannot_be_sent_reaches_the_notebook_through_stderr():
    with pytest.raises(WorkerError) as info:
        notebook_launch(closes_its_message_pipe_then_fails, num_processes=1, quiet=True)
    text = str(info.value)
    assert info.value.exitcode == 1 and "could not be sent to the launcher" in text
    assert 'raise ValueError("the traceback must still arrive")' in text
    assert "ValueError: the traceback must still arrive" in text


def test_an_exception_whose_str_fails_still_brings_its_traceback():
    with pytest.raises(WorkerError) as info:
        notebook_launch(raises_an_unprintable_error, num_processes=1, quiet=True)
    assert info.value.exc_type == "UnprintableError" and "str() of the exception failed" in str(info.value)
    assert "raise UnprintableError()" in info.value.traceback


def ignores_sigterm_and_waits():
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # so the launcher's shutdown waits its grace period
    print("ready", flush=True)
    time.sleep(60)


def test_ctrl_c_again_and_again_during_shutdown_still_ends_everything(sigint_raises_keyboard_interrupt):
    notebook_launch(prints_two_lines, num_processes=2, quiet=True)  # the first launch opens a pipe for good
    fds = len(os.listdir("/proc/self/fd"))
    ready, finished = threading.Event(), threading.Event()

    def press_ctrl_c_repeatedly():
        ready.wait(60)
        for _ in range(400):  # every 5 ms for up to 2 s: some land in every step of the shutdown
            if finished.is_set():
                return
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.005)

    def watch(event):
        if getattr(event, "text", None) == "ready":
            ready.set()
        if type(event).__name__ == "RunFinished":
            finished.set()

    presser = threading.Thread(target=press_ctrl_c_repeatedly)
    presser.start()
    outcome = []
    try:
        try:
            notebook_launch(ignores_sigterm_and_waits, num_processes=2, quiet=True, observers=[watch])
        except KeyboardInterrupt as exc:
            outcome.append(exc)
    except KeyboardInterrupt as exc:  # one more press while the first was being handled
        outcome.append(exc)
    finally:
        ready.set()
        finished.set()
        while presser.is_alive():
            try:
                presser.join(0.1)
            except KeyboardInterrupt:
                pass  # presses sent just before the presser saw the end
    assert outcome, "the launch was not interrupted"
    assert psutil.Process().children() == []  # not even a zombie: every worker was reaped
    assert len(os.listdir("/proc/self/fd")) == fds  # every pipe closed
