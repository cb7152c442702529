"""notebook_launch from plain Python: values, output, failures, cleanup, bad input (issue 3)."""

import gc
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import psutil
import pytest
import torch

from notebook_launcher import ConfigError, LaunchTimeout, WorkerError, notebook_launch


def rank_and_world():
    from notebook_launcher import Accelerator

    acc = Accelerator()
    print(f"hello from rank {acc.process_index}", flush=True)
    return acc.process_index, acc.num_processes, acc.mixed_precision, acc.gradient_accumulation_steps


@pytest.fixture(scope="module", autouse=True)
def _warm_launcher():
    """The first launch in a process imports torch's distributed stack (and DeepSpeed) once; the
    timed tests below measure how fast failures are seen, so they start from a warm launcher."""
    notebook_launch(rank_and_world, num_processes=2, quiet=True)


def test_every_rank_returns_its_value_and_output_is_kept():
    result = notebook_launch(rank_and_world, num_processes=2, quiet=True)
    assert list(result) == [(0, 2, "no", 1), (1, 2, "no", 1)]
    assert len(result) == 2
    assert "hello from rank 0" in result.logs[0] and "hello from rank 1" in result.logs[1]
    assert result.duration > 0 and result.start_method == "fork"


def test_output_is_printed_live_with_rank_prefix(capfd):
    def slow_printer():
        for i in range(3):
            print(f"tick {i}", flush=True)
            time.sleep(0.3)
        return "done"

    seen_at = {}
    start = time.monotonic()

    def observer(event):
        if getattr(event, "text", None) == "tick 0":
            seen_at["tick0"] = time.monotonic() - start

    result = notebook_launch(slow_printer, num_processes=1, observers=[observer])
    assert result[0] == "done"
    out = capfd.readouterr().out
    assert "[rank0] tick 0" in out and "[rank0] tick 2" in out
    # the first line arrived while the worker was still sleeping, not at the end
    assert seen_at["tick0"] < result.duration - 0.4


def test_c_level_writes_are_captured():
    def c_write():
        import ctypes

        libc = ctypes.CDLL(None)
        libc.write(1, b"from C\n", 7)
        os.write(2, b"raw stderr\n")
        return 1

    result = notebook_launch(c_write, num_processes=1, quiet=True)
    assert "from C" in result.logs[0] and "raw stderr" in result.logs[0]


def test_config_reaches_accelerator_in_workers(tmp_path):
    result = notebook_launch(rank_and_world, num_processes=2, mixed_precision="bf16", quiet=True)
    assert [r[2] for r in result] == ["bf16", "bf16"]
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("mixed_precision: fp16\ngradient_accumulation_steps: 4\nnum_processes: 2\n")
    result = notebook_launch(rank_and_world, config=str(cfg), quiet=True)
    assert list(result) == [(0, 2, "fp16", 4), (1, 2, "fp16", 4)]
    # explicit argument beats the file
    result = notebook_launch(rank_and_world, config=str(cfg), mixed_precision="no", quiet=True)
    assert result[0][2] == "no"


def test_default_config_file_is_used(tmp_path, monkeypatch):
    cfg = tmp_path / "default.yaml"
    cfg.write_text("mixed_precision: bf16\nnum_processes: 2\n")
    monkeypatch.setenv("NOTEBOOK_LAUNCHER_CONFIG_FILE", str(cfg))
    result = notebook_launch(rank_and_world, quiet=True)
    assert list(result) == [(0, 2, "bf16", 1), (1, 2, "bf16", 1)]


def big_tensor():
    from notebook_launcher import Accelerator

    acc = Accelerator()
    return torch.full((50 * 1024 * 1024 // 4,), float(acc.process_index))  # 50 MB each


def test_large_return_values_do_not_deadlock():
    result = notebook_launch(big_tensor, num_processes=2, quiet=True, timeout=120)
    assert result[0].numel() == 50 * 1024 * 1024 // 4 and float(result[1][-1]) == 1.0


def raise_on_rank_one_while_rank_zero_waits():
    import torch.distributed as dist

    from notebook_launcher import Accelerator

    acc = Accelerator()
    if acc.process_index == 1:
        time.sleep(0.3)
        print("failing at", flush=True)
        raise ValueError("rank one is broken")
    dist.barrier()


def clean_launch_seconds() -> float:
    """The floor for a failure's timing: a launch that fails nothing, timed from the call."""
    began = time.monotonic()
    notebook_launch(rank_and_world, num_processes=2, quiet=True)
    return time.monotonic() - began


def test_failure_names_the_culprit_quickly_and_leaves_nothing():
    clean = clean_launch_seconds()
    began = time.monotonic()
    with pytest.raises(WorkerError) as info:
        notebook_launch(raise_on_rank_one_while_rank_zero_waits, num_processes=2, quiet=True)
    elapsed = time.monotonic() - began  # from the call, as the user waits
    err = info.value
    assert err.rank == 1 and err.exc_type == "ValueError"
    assert "rank one is broken" in str(err) and "raise ValueError" in err.traceback
    assert isinstance(err.exception, ValueError)
    assert elapsed < 0.3 + 3 * clean + 1.0, (elapsed, clean)  # rank 1 fails 0.3 s in; no 5 s wait anywhere
    assert not psutil.Process().children()


@pytest.mark.parametrize("how, code", [("exit", 3), ("sigkill", -signal.SIGKILL)])
def test_a_rank_dying_without_exception_is_reported(how, code):
    def die():
        from notebook_launcher import Accelerator

        acc = Accelerator()
        if acc.process_index == 1:
            print("about to die", flush=True)
            if how == "exit":
                os._exit(3)
            os.kill(os.getpid(), signal.SIGKILL)
        acc.wait_for_everyone()

    clean = clean_launch_seconds()
    began = time.monotonic()
    with pytest.raises(WorkerError) as info:
        notebook_launch(die, num_processes=2, quiet=True)
    elapsed = time.monotonic() - began
    assert elapsed < 3 * clean + 1.0, (elapsed, clean)
    assert info.value.rank == 1 and info.value.exitcode == code
    assert "about to die" in str(info.value)


def test_timeout_stops_everything_and_names_running_ranks():
    def sleepy():
        time.sleep(60)

    clean = clean_launch_seconds()
    start = time.monotonic()
    with pytest.raises(LaunchTimeout) as info:
        notebook_launch(sleepy, num_processes=2, quiet=True, timeout=1.5)
    elapsed = time.monotonic() - start
    # the ranks sleep 60 s: a timeout that did not stop them shows here; the stack dumps (at most
    # 1 s) and the stop come on top of a launch's own cost, measured above
    assert elapsed < 1.5 + 1.0 + 3 * clean + 1.0, (elapsed, clean)
    assert info.value.running_ranks == [0, 1]


def test_keyboard_interrupt_stops_workers_and_relaunch_works(sigint_raises_keyboard_interrupt):
    def forever():
        print("running", flush=True)
        time.sleep(60)

    clean = clean_launch_seconds()
    timer = threading.Timer(1.5, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        notebook_launch(forever, num_processes=2, quiet=True)
    elapsed = time.monotonic() - start
    assert elapsed < 1.5 + 3 * clean + 1.0, (elapsed, clean)  # the workers sleep 60 s unless stopped
    assert not psutil.Process().children()
    assert list(notebook_launch(rank_and_world, num_processes=2, quiet=True))[1][0] == 1


def test_spawn_runs_locally_defined_functions_by_value():
    scale = 3

    class Local:
        def __init__(self, v):
            self.v = v

    def job(x):
        from notebook_launcher import Accelerator

        acc = Accelerator()
        return Local(x * scale + acc.process_index).v

    result = notebook_launch(job, args=(2,), num_processes=2, start_method="spawn", quiet=True, timeout=120)
    assert list(result) == [6, 7] and result.start_method == "spawn"


def test_fork_after_threaded_torch_in_parent_does_not_hang():
    a = torch.randn(800, 800)
    (a @ a).sum()  # the parent's OpenMP pool is now busy-initialised

    def matmul():
        torch.set_num_threads(2)
        b = torch.randn(800, 800)
        return float((b @ b).sum() * 0)

    assert list(notebook_launch(matmul, num_processes=1, quiet=True, timeout=60)) == [0.0]


def test_repeated_launches_leave_env_signals_and_fds_unchanged():
    env = dict(os.environ)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD)}
    notebook_launch(rank_and_world, num_processes=2, quiet=True)
    # garbage collected first, both times: an earlier test's unreachable objects closing their files
    # in between would hide a leak (it adds fds with every launch, 20 here)
    gc.collect()
    fds = sorted(os.listdir("/proc/self/fd"))
    for _ in range(20):
        notebook_launch(rank_and_world, num_processes=2, quiet=True)
    assert dict(os.environ) == env
    assert {s: signal.getsignal(s) for s in handlers} == handlers
    gc.collect()
    after = sorted(os.listdir("/proc/self/fd"))
    assert len(after) == len(fds), f"file descriptors: {fds} -> {after}"
    assert not psutil.Process().children()


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: notebook_launch(rank_and_world, num_processes=0), "num_processes=0"),
        (lambda: notebook_launch("not a function", num_processes=2), "needs a function"),
        (lambda: notebook_launch(rank_and_world, num_processes=2, mixed_precision="fp7"), "fp7"),
        (lambda: notebook_launch(rank_and_world, num_processes=2, start_method="thread"), "start_method"),
        (lambda: notebook_launch(rank_and_world, num_processes=2, timeout=-1), "timeout=-1"),
        (lambda: notebook_launch(rank_and_world, num_processes=2, num_nodes=2, node_rank=1), "master_addr"),
        (lambda: notebook_launch(rank_and_world, num_processes=2, colour="red"), "colour"),
    ],
)
def test_bad_input_is_a_clear_error(call, message):
    with pytest.raises(ConfigError, match=message):
        call()
    assert not psutil.Process().children()


def test_unpicklable_argument_under_spawn_names_the_object():
    lock = threading.Lock()
    with pytest.raises(ConfigError, match=r"args\[0\]"):
        notebook_launch(rank_and_world, args=(lock,), num_processes=2, start_method="spawn")
    assert not psutil.Process().children()


def test_a_busy_port_on_one_machine_is_replaced_and_said(capsys):
    """The one port rule (system/network.rendezvous_port), as the CLI applies it too: nothing off this
    machine dials the port, so a busy one gives way to a free one, said in a line."""
    with socket.socket() as s:
        s.bind(("", 0))
        s.listen()
        port = s.getsockname()[1]
        result = notebook_launch(rank_and_world, num_processes=2, master_port=port)
    assert [value[:2] for value in result] == [(0, 2), (1, 2)]
    assert (
        f"notebook_launch: port {port} is in use on this machine; using a free port instead."
        in capsys.readouterr().out
    )
    assert not psutil.Process().children()


def test_a_busy_port_on_machine_0_of_several_is_a_clear_error():
    """Over several machines every machine dials the number: machine 0 cannot silently change it."""
    with socket.socket() as s:
        s.bind(("", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(ConfigError, match=f"main_process_port={port} is already in use on this machine"):
            notebook_launch(
                rank_and_world,
                num_processes=1,
                num_nodes=2,
                node_rank=0,
                master_addr="127.0.0.1",
                master_port=port,
            )
    assert not psutil.Process().children()


def test_timeout_shows_where_each_hung_rank_was():
    def stuck_in_barrier():
        import torch.distributed as dist

        from notebook_launcher import Accelerator

        acc = Accelerator()
        if acc.process_index == 0:
            dist.barrier()  # rank 1 never joins
        else:
            time.sleep(60)

    # long enough for rank 0 to reach the barrier however loaded the machine: a few times a whole
    # launch measured here, which forms the same process group, and never under the fixed 8 s this
    # test used before (one run under heavy load failed with 3 launches + 1 s; its cause was not found)
    timeout = max(8.0, 3 * clean_launch_seconds() + 1.0)
    with pytest.raises(LaunchTimeout) as info:
        notebook_launch(stuck_in_barrier, num_processes=2, quiet=True, timeout=timeout)
    assert "dist.barrier()  # rank 1 never joins" in info.value.stacks[0]
    assert "time.sleep(60)" in info.value.stacks[1]
    assert "where rank 0 was" in str(info.value)


def test_in_process_runs_here_with_the_config_and_restores_everything():
    env = dict(os.environ)

    def here(x):
        from notebook_launcher import Accelerator

        acc = Accelerator()
        acc.log({"loss": 1.5}, step=0)
        return os.getpid(), acc.num_processes, acc.mixed_precision, x

    result = notebook_launch(here, args=(4,), in_process=True, mixed_precision="bf16")
    assert list(result) == [(os.getpid(), 1, "bf16", 4)]
    assert result.metrics[0]["loss"] == 1.5 and result.start_method == "in_process"
    assert dict(os.environ) == env

    def broken():
        raise KeyError("original")

    with pytest.raises(KeyError, match="original"):
        notebook_launch(broken, in_process=True)
    with pytest.raises(ConfigError, match="num_processes=2"):
        notebook_launch(here, args=(1,), num_processes=2, in_process=True)


def test_relaunch_after_failures_works_every_time():
    def fail_on_rank_one():
        from notebook_launcher import Accelerator

        acc = Accelerator()
        if acc.process_index == 1:
            raise RuntimeError("planned")
        acc.wait_for_everyone()

    for _ in range(5):
        with pytest.raises(WorkerError, match="planned"):
            notebook_launch(fail_on_rank_one, num_processes=2, quiet=True, timeout=30)
        assert list(notebook_launch(rank_and_world, num_processes=2, quiet=True, timeout=30))[1][0] == 1


def test_unpicklable_global_used_by_the_function_is_named():
    code = textwrap.dedent(
        """
        import threading
        from notebook_launcher import notebook_launch, ConfigError
        LOCK = threading.Lock()
        def uses_lock():
            with LOCK:
                return 1
        try:
            notebook_launch(uses_lock, num_processes=1, start_method="spawn")
        except ConfigError as exc:
            print("MESSAGE", exc)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "the variable 'LOCK' that uses_lock uses" in out.stdout, out.stdout + out.stderr


def test_spawn_in_an_unguarded_script_explains_the_main_guard(tmp_path):
    script = tmp_path / "unguarded.py"
    script.write_text(
        "from notebook_launcher import notebook_launch, WorkerError\n"
        "def f():\n    return 1\n"
        "try:\n    notebook_launch(f, num_processes=1, start_method='spawn', timeout=60)\n"
        "except WorkerError as exc:\n    print('MESSAGE', exc)\n"
    )
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert 'if __name__ == "__main__":' in out.stdout, out.stdout + out.stderr


def test_the_first_launch_leaves_the_interpreters_environment_as_it_was():
    """The launcher's warm-up imports torch._dynamo in the kernel (launch/warm/warmup.py), which sets
    TORCHINDUCTOR_CACHE_DIR at import: the user's os.environ must not change (a fresh interpreter)."""
    from fresh_python import last_line

    code = textwrap.dedent(
        """
        import os
        from notebook_launcher import notebook_launch
        def quick():
            return 1
        if __name__ == "__main__":
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)  # as a user's (this test's process may have it)
            before = dict(os.environ)
            notebook_launch(quick, num_processes=2, quiet=True)
            changed = sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k))
            print(changed)
        """
    )
    assert last_line(code) == "[]"
