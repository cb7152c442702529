"""Helpers shared by the CLI tests (no tests here): run the real CLI in a subprocess, free ports."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "notebook_launcher"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def cli_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A clean environment: no user config file, no torchrun variables from an outer launch."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "TORCHELASTIC_"))}
    for name in (
        "NOTEBOOK_LAUNCHER_CONFIG_FILE",
        "NOTEBOOK_LAUNCHER_LAUNCH_CONFIG",
        "OMP_NUM_THREADS",
        "TORCH_DISTRIBUTED_DEBUG",
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
    ):
        env.pop(name, None)
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def start_cli(
    args: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    stdin: str | None = None,
    program: list[str] | None = None,
) -> subprocess.Popen:
    """Start `notebook-launcher ARGS` (or `program ARGS`) in its own session, so a timeout can stop it
    with all its workers."""
    return subprocess.Popen(
        [*(CLI if program is None else program), *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def finish(
    proc: subprocess.Popen, *, stdin: str | None = None, timeout: float = 90
) -> subprocess.CompletedProcess:
    """Wait for a process from start_cli; on timeout kill its whole process group and fail."""
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(
            f"CLI timed out after {timeout}s: {proc.args}\nstdout:\n{out}\nstderr:\n{err}"
        ) from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def run_cli(
    args: list[str],
    *,
    cwd: Path,
    env: dict[str, str] | None = None,
    stdin: str | None = None,
    timeout: float = 90,
) -> subprocess.CompletedProcess:
    proc = start_cli(args, cwd=cwd, env=env or cli_env(cwd), stdin=stdin)
    return finish(proc, stdin=stdin, timeout=timeout)


def explain(result: subprocess.CompletedProcess) -> str:
    """What to show when an assertion about a CLI run fails."""
    return f"exit {result.returncode}\n--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"


_MACHINE = """
import importlib, json, sys
from notebook_launcher import notebook_launch
module, name, rank, address, port = sys.argv[1:6]
fn = getattr(importlib.import_module(module), name)
result = notebook_launch(fn, num_processes=1, num_nodes=2, node_rank=int(rank), master_addr=address,
                         master_port=int(port), quiet=True, timeout=60)
print("RESULT " + json.dumps(list(result)), flush=True)
"""


def two_machines_here(fn, master_addr: str, port: int) -> dict:
    """notebook_launch(fn) as two one-process "machines": two programs on this host, as two machines
    run it (machine 1 first, 0.2 s apart); each one's results by machine rank, through JSON (a tuple
    comes back as a list). Not two threads of one process: a launcher forks its ranks, and a fork
    taken while the other launcher's store thread holds glibc's resolver lock hands the rank that
    lock held (launch/planning.py)."""
    import json
    import time

    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(ROOT / "tests"), str(ROOT), os.environ.get("PYTHONPATH")])
        ),
    }
    machines = {}
    for rank in (1, 0):
        machines[rank] = start_cli(
            [fn.__module__, fn.__name__, str(rank), master_addr, str(port)],
            cwd=ROOT,
            env=env,
            program=[sys.executable, "-c", _MACHINE],
        )
        time.sleep(0.2)
    results = {}
    for rank, machine in machines.items():
        done = finish(machine, timeout=120)
        assert done.returncode == 0, f"machine {rank} failed:\n{explain(done)}"
        line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
        results[rank] = json.loads(line.removeprefix("RESULT "))
    return results


def machine_args(machine_rank: int, address: str, port: int, num_processes: int = 2) -> list[str]:
    """`launch`'s flags for one of two machines meeting at address:port, on the CPU."""
    return ["launch", "--num_machines", "2", "--machine_rank", str(machine_rank), "--main_process_ip", address,
            "--main_process_port", str(port), "--num_processes", str(num_processes), "--cpu"]  # fmt: skip
