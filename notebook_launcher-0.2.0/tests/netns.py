"""Two "hosts" on one machine for the multi-machine tests (no tests here): two network namespaces
joined by a veth pair, 10.77.0.1/24 and 10.77.0.2/24, each with its own loopback — so a rank that
advertises 127.0.0.1 (what the hostname resolves to here) cannot be reached from the other side,
exactly as between two real machines.

Needs root and iproute2 (`ip netns`); `two_hosts()` skips with the reason after a real try.
Names carry the test process's pid, so parallel runs do not collide, and namespaces left by a run
that was killed are removed by the next one.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PREFIX = "nlt"
SUBNET = "10.77.0"
# Variables of an outer launch or scheduler that must not leak into the processes we start.
FOREIGN = re.compile(
    r"^(RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|GROUP_RANK|NODE_RANK|MASTER_ADDR|MASTER_PORT|"
    r"SLURM_.*|OMPI_.*|PMI_.*|PMIX_.*|MV2_.*|MPI_LOCAL.*|PET_.*|TORCHELASTIC_.*|KUBERNETES_.*|"
    r"(GLOO|NCCL|TP)_SOCKET_IFNAME|NOTEBOOK_LAUNCHER_.*|OMP_NUM_THREADS)$"
)


@dataclass(frozen=True)
class Host:
    namespace: str
    interface: str
    address: str

    def command(self, *argv: str) -> list[str]:
        return ["ip", "netns", "exec", self.namespace, *argv]


def clean_env(tmp_path: Path | None = None, **extra: str) -> dict[str, str]:
    """This environment without any launcher's or scheduler's variables, with our code first on the path."""
    env = {k: v for k, v in os.environ.items() if not FOREIGN.match(k)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if tmp_path is not None:
        env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    env.update(extra)
    return env


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise RuntimeError(f"`ip {' '.join(args)}` failed: {result.stderr.strip()}")
    return result


def _remove(namespace: str) -> None:
    """Stop what still runs inside (only processes our tests started there), then delete it."""
    pids = _ip("netns", "pids", namespace, check=False).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    _ip("netns", "del", namespace, check=False)


def _remove_stale() -> None:
    """Namespaces of earlier test runs whose process is gone (a killed run could not clean up)."""
    listing = _ip("netns", "list", check=False).stdout
    for name in re.findall(rf"^({PREFIX}(\d+)[ab])\b", listing, flags=re.M):
        namespace, pid = name
        if not Path(f"/proc/{pid}").exists():
            _remove(namespace)


def _skip_reason() -> str | None:
    if not sys.platform.startswith("linux"):
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "creating network namespaces needs root (the CI runs the suite as root)"
    if shutil.which("ip") is None:
        return "the `ip` command (Debian package iproute2) is not installed; see scripts/install.sh"
    return None


@contextmanager
def two_hosts() -> Iterator[tuple[Host, Host]]:
    """Create the two namespaces; remove them (and anything left running inside) afterwards."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    _remove_stale()
    tag = f"{PREFIX}{os.getpid()}"
    hosts = (Host(f"{tag}a", f"{tag}a", f"{SUBNET}.1"), Host(f"{tag}b", f"{tag}b", f"{SUBNET}.2"))
    try:
        for host in hosts:
            _ip("netns", "add", host.namespace)
        _ip("link", "add", hosts[0].interface, "type", "veth", "peer", "name", hosts[1].interface)
        for host in hosts:
            _ip("link", "set", host.interface, "netns", host.namespace)
            _ip("-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", host.interface)
            _ip("-n", host.namespace, "link", "set", host.interface, "up")
            _ip("-n", host.namespace, "link", "set", "lo", "up")
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        for host in hosts:
            _remove(host.namespace)
        pytest.skip(f"cannot create network namespaces here: {exc}")
    try:
        _wait_until_linked(hosts)
        yield hosts
    finally:
        for host in hosts:
            _remove(host.namespace)


def _wait_until_linked(hosts: tuple[Host, Host], limit: float = 10.0) -> None:
    """A veth pair takes a moment to come up (and to pass duplicate-address detection)."""
    deadline = time.monotonic() + limit
    while True:
        state = _ip("-n", hosts[1].namespace, "-br", "link", "show", hosts[1].interface).stdout
        if "UP" in state.split()[1:3] or "LOWER_UP" in state:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"veth did not come up: {state.strip()}")
        time.sleep(0.1)


def start_in(host: Host, argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen:
    """Start `argv` inside `host`'s namespace in its own session (a timeout can kill its whole group)."""
    return popen_in_session(host.command(*argv), env, cwd)


def popen_in_session(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen:
    """`argv` with its output captured, in its own session (a timeout can kill its whole group)."""
    return subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def accelerator_all_reduce_script(last_fields: str) -> str:
    """A script that all-reduces rank + 1 through Accelerator() and prints one RESULT line: the world's
    source, index, processes, local index, the sum, then `last_fields` (Python expressions)."""
    return f"""
import json, os
import torch, torch.distributed as dist
from notebook_launcher import Accelerator
from notebook_launcher.runtime.world.environments import detect_world
source = detect_world().source
acc = Accelerator()
value = torch.tensor([float(acc.process_index + 1)])
dist.all_reduce(value)
print("RESULT " + json.dumps([source, acc.process_index, acc.num_processes, acc.local_process_index, value.item(),
                              {last_fields}]), flush=True)
acc.end_training()
"""


def finish_all(procs: list[subprocess.Popen], timeout: float) -> list[subprocess.CompletedProcess]:
    """Wait for every process; on timeout kill all their groups and fail with what they printed."""
    deadline = time.monotonic() + timeout
    results = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for other in procs:
                try:
                    os.killpg(other.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            out, err = proc.communicate()
            raise AssertionError(
                f"timed out after {timeout}s: {proc.args}\n{out[-3000:]}\n{err[-3000:]}"
            ) from None
        results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return results


def explain(results: list[subprocess.CompletedProcess]) -> str:
    return "\n".join(
        f"--- {' '.join(r.args[4:7])} exit {r.returncode}\nstdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}"
        for r in results
    )
