"""A real local Ray cluster for the tests (no tests here): `ray start --head --block` on this host
with 2 CPUs, in its own session and temp dir, stopped by its process id afterwards (never `ray
stop`, which would end every Ray on the machine). Skips with the reason after a real try.

On a loaded machine Ray's raylet can abort at start: it is not given the dashboard agent's listen
port on its command line, so it waits for the agent to write it to a file, for a fixed 15 s
(WaitForPersistedPort's default in Ray 2.60: RAY_agent_register_timeout_ms and
RAY_raylet_start_wait_time_s do not change it — checked with an agent made to import in 25 s, which
aborts the raylet with or without them), and that agent is a Python process that may need longer to
import. We pass the agent's port ourselves, so we write that file for the raylet as soon as the
session exists (the agent then listens on that same port). The cluster starts once for the Ray
tests, which run one after the other (the `ray_cluster` fixture); a start that fails skips with
Ray's words, without a retry. After the last of them conftest stops it and asks
`leftover_processes()`: a process of that cluster still running fails that test's teardown.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from netns import clean_env

START_SECONDS = 240.0


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


class LocalRay:
    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="nlray"))
        _ROOTS.append(self.root)
        self.pid: int | None = None
        self.address = ""
        self.log = self.root / "ray_start.log"

    def start(self) -> str | None:
        """Start the head node; None when it runs, else why not."""
        ray = shutil.which("ray")
        if ray is None:
            return "the `ray` command is not installed (pip install ray; it is in the test extra)"
        gcs, listen, grpc, runtime_env, metrics, client = _free_ports(6)
        pidfile = self.root / "pid"
        argv = [ray, "start", "--head", "--block", "--num-cpus", "2", "--port", str(gcs),
                "--node-ip-address", "127.0.0.1", "--include-dashboard=false", "--disable-usage-stats",
                "--temp-dir", str(self.root / "tmp"), "--dashboard-agent-listen-port", str(listen),
                "--dashboard-agent-grpc-port", str(grpc), "--runtime-env-agent-port", str(runtime_env),
                "--metrics-export-port", str(metrics), "--ray-client-server-port", str(client),
                "--object-store-memory", str(200 * 1024**2)]  # fmt: skip
        script = f'echo $$ > {pidfile}; exec "$@" > {self.log} 2>&1'
        # setsid -f: the cluster is no child of the test process (the suite checks for leftover children)
        subprocess.run(["setsid", "-f", "sh", "-c", script, "sh", *argv], env=clean_env(), check=True)
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.pid is None and pidfile.exists() and pidfile.read_text().strip():
                self.pid = int(pidfile.read_text())
            self._write_agent_port(listen)
            text = self.log.read_text() if self.log.exists() else ""
            if "Ray runtime started" in text:
                self.address = f"127.0.0.1:{gcs}"
                return None
            if "Exception" in text or (self.pid is not None and not process_alive(self.pid)):
                return f"`ray start` failed: {text.strip()[-1500:]}"
            time.sleep(0.3)
        return f"`ray start` did not finish within {START_SECONDS:.0f} s"

    def _write_agent_port(self, port: int) -> None:
        for gcs_file in (self.root / "tmp").glob("session_*/gcs_server_port_*"):
            node_id = gcs_file.name.rsplit("_", 1)[1]
            target = gcs_file.parent / f"dashboard_agent_listen_port_{node_id}"
            if not target.exists():
                target.write_text(str(port))

    def stop(self) -> None:
        """SIGTERM to `ray start --block` (it stops what it started), then SIGKILL to its session."""
        if self.pid is not None and process_alive(self.pid):
            os.kill(self.pid, signal.SIGTERM)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and process_alive(self.pid):
                time.sleep(0.2)
        if self.pid is not None:
            for pid in _session_members(self.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        shutil.rmtree(self.root, ignore_errors=True)


def process_alive(pid: int) -> bool:
    """Whether pid runs (a zombie does not); the SLURM support uses it too."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


def _session_members(session: int) -> list[int]:
    """The processes of the cluster's session (setsid gave it its own)."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().split(") ")[1].split()
            except OSError:
                continue
            if int(fields[3]) == session:
                members.append(int(entry.name))
    return members


def session_processes(cluster: LocalRay) -> list[int]:
    return _session_members(cluster.pid) if cluster.pid else []


_SHARED: dict[str, LocalRay | str] = {}  # "cluster": the running one, or "failed": why it could not start
_ROOTS: list[Path] = []  # the temp dir of every cluster this session started


def leftover_processes() -> list[str]:
    """Processes of a cluster this session started that still run (at the session's end: none).
    Each is named by its pid and command; other sessions' clusters on the machine are not counted."""
    left = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(str(root) in command for root in _ROOTS) and process_alive(int(entry.name)):
            left.append(f"{entry.name}: {command[:120]}")
    return left


@pytest.fixture(name="ray_cluster")
def shared_ray_cluster() -> LocalRay:
    """One local Ray cluster for the tests that run one after the other (ours: a unit of the suite's
    schedule, tests/suite_schedule.py), shared by every test file that imports this fixture: started
    on first use (a start that fails skips with its reason, and is not tried again), and stopped by
    conftest right after the last of them (stop_when_done_with): an idle cluster's daemons would
    otherwise use a CPU share for the rest of the run. A later test that uses it starts it again."""
    pytest.importorskip("ray", reason="Ray is not installed (pip install ray; it is in the test extra)")
    if "failed" in _SHARED:
        pytest.skip(f"local Ray cluster unavailable: {_SHARED['failed']}")
    if "cluster" not in _SHARED:
        cluster = LocalRay()
        reason = cluster.start()
        if reason is not None:
            cluster.stop()
            _SHARED["failed"] = reason
            print(f"local Ray cluster unavailable: {reason}")
            pytest.skip(f"local Ray cluster unavailable: {reason}")
        _SHARED["cluster"] = cluster
    shared = _SHARED["cluster"]
    assert isinstance(shared, LocalRay)
    return shared


def stop_when_done_with(nextitem: pytest.Item | None) -> None:
    """Called from conftest's teardown of a test that used the cluster: when the next test does not
    (or none follows), stop it and check that nothing of it is left; a failure here is reported as
    that test's teardown error (from an xdist worker too)."""
    if nextitem is not None and "ray_cluster" in getattr(nextitem, "fixturenames", ()):
        return
    running = _SHARED.pop("cluster", None)
    if isinstance(running, LocalRay):
        running.stop()
    left = leftover_processes()
    assert not left, "the Ray cluster left processes running:\n  " + "\n  ".join(left)
