"""A real local Ray cluster for the tests (no tests here): `ray start --head --block` on this host
with 2 CPUs, in its own session and temp dir, stopped by its process id afterwards (never `ray
stop`, which would end every Ray on the machine). Skips with the reason after a real try.

On a loaded machine Ray's raylet can abort at start: it waits a fixed 15 s for its dashboard
agent to write its listen port to a file, and that agent is a Python process that may need longer
to import. We pass the agent's port ourselves, so we write that file for the raylet as soon as the
session exists (the agent then listens on that same port), and retry a start that still fails.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from netns import clean_env

START_SECONDS = 240.0
ATTEMPTS = 2


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
            if "Exception" in text or (self.pid is not None and not _alive(self.pid)):
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
        if self.pid is not None and _alive(self.pid):
            os.kill(self.pid, signal.SIGTERM)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and _alive(self.pid):
                time.sleep(0.2)
        if self.pid is not None:
            for pid in _session_members(self.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        shutil.rmtree(self.root, ignore_errors=True)


def _alive(pid: int) -> bool:
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


@contextmanager
def local_ray() -> Iterator[LocalRay]:
    """A running local Ray cluster (skips with the reason when it cannot start here)."""
    reasons = []
    for _ in range(ATTEMPTS):
        cluster = LocalRay()
        reason = cluster.start()
        if reason is None:
            try:
                yield cluster
            finally:
                cluster.stop()
            return
        cluster.stop()
        reasons.append(reason)
    print(f"local Ray cluster unavailable: {reasons[-1]}")
    pytest.skip(f"local Ray cluster unavailable after {ATTEMPTS} tries: {reasons[-1]}")
