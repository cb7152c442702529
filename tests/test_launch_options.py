"""notebook_launch's defaults and options, each observed in real workers: the process count when
none is given, threads per worker, show_ranks, several failing ranks, and a clean parent after a
failure or a timeout (not only after a success)."""

import gc
import json
import os
import signal
import time

import psutil
import pytest
import torch
from test_cli_helpers import free_port

from notebook_launcher import LaunchTimeout, WorkerError, notebook_launch
from notebook_launcher.system.hardware import cpu_count
from notebook_launcher.system.network import port_is_free


def rank_and_threads():
    from notebook_launcher import Accelerator

    acc = Accelerator()
    return acc.process_index, acc.num_processes, torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")


def test_without_num_processes_a_cpu_machine_gets_two_processes_and_is_told(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("NOTEBOOK_LAUNCHER_CONFIG_FILE", str(tmp_path / "none.yaml"))  # no default file
    result = notebook_launch(rank_and_threads)
    assert [r[:2] for r in result] == [(0, 2), (1, 2)]
    assert "num_processes not given and no GPU found; using 2 CPU processes" in capsys.readouterr().out


def test_each_worker_gets_its_share_of_the_cores(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    share = max(1, cpu_count() // 2)
    assert [r[2:] for r in notebook_launch(rank_and_threads, num_processes=2, quiet=True)] == [
        (share, str(share)),
        (share, str(share)),
    ]
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the user's own setting wins
    assert [r[2:] for r in notebook_launch(rank_and_threads, num_processes=2, quiet=True)] == [
        (1, "1"),
        (1, "1"),
    ]


def say_hello():
    from notebook_launcher import Accelerator

    print(f"hello from rank {Accelerator().process_index}", flush=True)


def test_show_ranks_prints_only_the_chosen_ranks_and_keeps_every_log(capsys):
    result = notebook_launch(say_hello, num_processes=2, show_ranks=1)
    out = capsys.readouterr().out
    assert "[rank1] hello from rank 1" in out
    assert "hello from rank 0" not in out
    assert "hello from rank 0" in result.logs[0]  # hidden from the cell, still kept


def both_ranks_fail(folder):
    """Rank 1 fails first; rank 0 fails too once rank 1 has exited (so after the launcher saw rank 1's
    failure, whatever the machine's load), ignoring the launcher's stop signal to get that far."""
    from notebook_launcher import Accelerator
    from notebook_launcher.launch.supervise.processes import STOP_SIGNALS

    if os.environ["RANK"] == "0":  # before anything else: the stop may come as soon as rank 1 fails
        # Both of the stop's signals: its SIGTERM (meant for what a worker started) ends a rank that
        # has no Accelerator listening yet, and rank 0 may still be inside Accelerator() on a busy
        # machine when rank 1 has already failed (seen on CI: rank 0 died of SIGTERM, unreported).
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)
    rank = Accelerator().process_index
    marker = os.path.join(folder, "rank1.pid")
    if rank == 1:
        with open(marker, "w") as f:
            f.write(str(os.getpid()))
        raise ValueError("rank one fails first")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with open(marker) as f:
                if psutil.Process(int(f.read())).status() == psutil.STATUS_ZOMBIE:
                    break
        except psutil.NoSuchProcess:
            break  # rank 1 is gone and reaped
        except (FileNotFoundError, ValueError):
            pass  # not written yet
        time.sleep(0.01)
    raise KeyError("rank zero's own problem")


def test_several_failing_ranks_report_the_first_and_list_the_rest(tmp_path):
    with pytest.raises(WorkerError) as info:
        notebook_launch(both_ranks_fail, args=(str(tmp_path),), num_processes=2, quiet=True)
    err = info.value
    assert err.rank == 1 and err.exc_type == "ValueError"
    assert [(other.rank, other.exc_type) for other in err.others] == [(0, "KeyError")]
    also = str(err).split("Also failed")[1]
    assert "rank 0 raised KeyError" in also and "rank one fails first" not in also


def sleeps():
    time.sleep(60)


def _snapshot():
    gc.collect()  # unreachable objects of earlier tests close their files now, not between two snapshots
    return (
        dict(os.environ),
        {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD)},
        sorted(os.listdir("/proc/self/fd")),
    )


@pytest.mark.parametrize("outcome", ["failure", "timeout"])
def test_the_parent_is_clean_after_a_failure_or_a_timeout(outcome):
    notebook_launch(say_hello, num_processes=2, quiet=True)  # warm: one-time imports open files
    before = _snapshot()
    ports = []
    for _ in range(3):
        port = free_port()
        ports.append(port)
        expected = WorkerError if outcome == "failure" else LaunchTimeout
        fn = both_ranks_fail if outcome == "failure" else sleeps
        with pytest.raises(expected):
            notebook_launch(
                fn, num_processes=2, quiet=True, master_port=port, timeout=1.0 if fn is sleeps else None
            )
    after = _snapshot()
    assert after[0] == before[0], "os.environ changed"
    assert after[1] == before[1], "signal handlers changed"
    assert len(after[2]) == len(before[2]), f"file descriptors leaked: {before[2]} -> {after[2]}"
    assert all(port_is_free(port) for port in ports), "a rendezvous port is still held"
    assert not psutil.Process().children()


WARM_START_SCRIPT = """
import json, sys, time
from notebook_launcher import notebook_launch

def ddp_step():
    import torch
    from notebook_launcher import Accelerator
    acc = Accelerator()
    model = acc.prepare(torch.nn.Linear(2, 1))  # DDP: its first construction imports torch._dynamo
    acc.backward(model(torch.ones(1, 2)).sum())
    return "torch._dynamo" in sys.modules

if __name__ == "__main__":
    before = "torch._dynamo" in sys.modules
    start = time.monotonic()
    first = notebook_launch(ddp_step, num_processes=2, quiet=True)
    first_s = time.monotonic() - start
    start = time.monotonic()
    notebook_launch(ddp_step, num_processes=2, quiet=True)
    relaunch_s = time.monotonic() - start
    print("WARM " + json.dumps({"before": before, "after": "torch._dynamo" in sys.modules,
                                "workers": list(first), "first_s": first_s, "relaunch_s": relaunch_s}))
"""


def test_the_first_launch_imports_what_every_worker_needs_once_in_the_parent(tmp_path):
    """Warm start: torch._dynamo (which DDP imports on first use, ~1.3 s) is imported in the parent
    before forking, so forked workers find it already loaded and relaunches start fast, also in a
    parent that never imported torch (its workers import the runtime and torch in any case)."""
    import subprocess
    import sys

    script = tmp_path / "warm.py"
    script.write_text(WARM_START_SCRIPT)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    facts = json.loads(out.stdout.split("WARM ", 1)[1])
    assert facts["before"] is False and facts["after"] is True  # imported in the parent by the launch
    assert facts["workers"] == [True, True]
    # one relaunch, timed from the call: its workers find torch._dynamo loaded, the first launch imported it
    assert facts["relaunch_s"] < facts["first_s"], facts


def test_one_process_still_runs_in_a_worker_not_in_the_caller():
    """num_processes=1 runs in a child too, so the kernel stays clean (in_process=True opts out)."""
    (pid, world) = notebook_launch(
        lambda: (os.getpid(), int(os.environ["WORLD_SIZE"])), num_processes=1, quiet=True
    )[0]
    assert pid != os.getpid() and world == 1
    assert "WORLD_SIZE" not in os.environ or os.environ["WORLD_SIZE"] != "1"


DEEPSPEED_WARM_SCRIPT = """
import json, sys, time
import torch
from notebook_launcher import notebook_launch

def zero2_step():
    from notebook_launcher import Accelerator
    inherited = "deepspeed.runtime.zero.muon.muon_optimizer" in sys.modules
    acc = Accelerator()
    model = torch.nn.Linear(2, 1)
    model, optimizer = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    acc.backward(model(torch.ones(2, 2)).sum())
    optimizer.step()
    return inherited

if __name__ == "__main__":
    options = dict(num_processes=2, use_cpu=True, distributed_type="DEEPSPEED", deepspeed_config={"zero_stage": 2})
    workers = notebook_launch(zero2_step, quiet=True, **options)
    print("WARM " + json.dumps({"workers": list(workers)}), flush=True)
"""


def test_a_deepspeed_launch_imports_what_deepspeed_initialize_needs_once_in_the_parent(tmp_path):
    """deepspeed.initialize() imports its Muon optimizer (which loads torch._inductor, ~2.4 s) on first
    use: the launch imports it in the parent, so workers of every DeepSpeed launch find it loaded."""
    import subprocess
    import sys

    pytest.importorskip("deepspeed", reason="deepspeed is not installed (it is in the test extra)")
    script = tmp_path / "warm_deepspeed.py"
    script.write_text(DEEPSPEED_WARM_SCRIPT)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.split("WARM ", 1)[1]) == {"workers": [True, True]}, out.stdout
