"""An isolated JupyterLab 4 (or Notebook 7) on 127.0.0.1 with an OS-chosen port, for browser tests.

Every Jupyter directory points into a fresh work dir, so a developer's settings, extensions and old
workspaces cannot leak in. The real port is read back from the server's runtime file.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from kernel_isolation import SERVER_ARGUMENTS

SETTINGS = {
    # no "news" / update toast over the notebook
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
    # keep every cell in the DOM so selectors find off-screen cells
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}


APPS = {"lab": ("jupyter-lab", "LabApp"), "notebook": ("jupyter-notebook", "JupyterNotebookApp")}


class LabServer:
    """`with LabServer(root, workdir) as lab: page.goto(lab.notebook_url("x.ipynb"))`.

    app="notebook" serves Notebook 7 (one document per page, /notebooks/...) instead of JupyterLab.
    """

    def __init__(self, root_dir: Path, workdir: Path, startup_timeout: float = 90, app: str = "lab") -> None:
        if app not in APPS:
            raise ValueError(f"app must be one of {sorted(APPS)}, not {app!r}")
        self.app = app
        self.root_dir = Path(root_dir).resolve()
        self.workdir = Path(workdir)
        self.startup_timeout = startup_timeout
        self.token = secrets.token_hex(24)
        self.log_path = self.workdir / "jupyter.log"
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None

    def __enter__(self) -> LabServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        dirs = {name: self.workdir / name for name in ("config", "data", "settings", "workspaces")}
        # the kernels' ipc sockets are named after their connection files here: a short path; the
        # server's TMPDIR (its kernels' too) is in it, so what they leave there goes at stop()
        self._runtime = tempfile.mkdtemp(prefix="nl-lab-")
        dirs["runtime"] = Path(self._runtime)
        (dirs["runtime"] / "tmp").mkdir()
        for path in dirs.values():
            path.mkdir(parents=True, exist_ok=True)
        for name, value in SETTINGS.items():
            target = dirs["settings"] / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(value))
        env = dict(
            os.environ,
            JUPYTER_CONFIG_DIR=str(dirs["config"]),
            JUPYTER_DATA_DIR=str(dirs["data"]),
            JUPYTER_RUNTIME_DIR=str(dirs["runtime"]),
            JUPYTERLAB_SETTINGS_DIR=str(dirs["settings"]),
            JUPYTERLAB_WORKSPACES_DIR=str(dirs["workspaces"]),
            JUPYTER_PLATFORM_DIRS="1",
            TMPDIR=str(dirs["runtime"] / "tmp"),
        )
        executable, app_class = APPS[self.app]
        command = [
            str(Path(sys.executable).with_name(executable)),
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            "--ServerApp.port=0",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={self.root_dir}",
            f"--{app_class}.expose_app_in_browser=True",  # window.jupyterapp, used to read cell outputs
            "--ServerApp.terminals_enabled=False",
            *SERVER_ARGUMENTS,
        ]
        if self.app == "lab":
            command += [
                "--LabApp.news_url=None",
                "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            ]
        if os.geteuid() == 0:  # jupyter refuses to run as root without it
            command.append("--ServerApp.allow_root=True")
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            command,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._wait_ready(dirs["runtime"] / f"jpserver-{self.proc.pid}.json")

    def _wait_ready(self, info_file: Path) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while self.port is None:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"jupyter {self.app} exited with {self.proc.returncode}; see {self.log_path}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"jupyter {self.app} wrote no {info_file} in {self.startup_timeout} s; see {self.log_path}"
                )
            try:
                self.port = int(json.loads(info_file.read_text())["port"])
            except (OSError, ValueError, KeyError):
                time.sleep(0.1)
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.url("api/status"), timeout=2) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        raise TimeoutError(
            f"jupyter {self.app}'s API did not answer in {self.startup_timeout} s; see {self.log_path}"
        )

    def stop(self) -> None:
        """Shut down through the API (kernels too); kill the process group if that fails."""
        if self.proc is None:
            return
        try:
            if self.proc.poll() is None:
                request = urllib.request.Request(self.url("api/shutdown"), method="POST", data=b"")
                urllib.request.urlopen(request, timeout=5).read()
                self.proc.wait(15)
        except (OSError, subprocess.TimeoutExpired):
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        finally:
            if not self._log.closed:
                self._log.close()
            shutil.rmtree(self._runtime, ignore_errors=True)

    def delete_sessions(self) -> None:
        """Shut every kernel session down, so a reopened notebook gets a fresh kernel."""
        with urllib.request.urlopen(self.url("api/sessions"), timeout=10) as reply:
            sessions = json.load(reply)
        for session in sessions:
            request = urllib.request.Request(self.url(f"api/sessions/{session['id']}"), method="DELETE")
            urllib.request.urlopen(request, timeout=30).read()

    def url(self, path: str, **params: str | None) -> str:
        query = "&".join(
            [f"token={self.token}"] + [k if v is None else f"{k}={v}" for k, v in params.items()]
        )
        return f"http://127.0.0.1:{self.port}/{path}?{query}"

    def notebook_url(self, notebook: str) -> str:
        """Lab: a fresh workspace per page, so it does not restore other notebooks' tabs."""
        if self.app == "notebook":
            return self.url(f"notebooks/{notebook}")
        return self.url(f"lab/workspaces/t{secrets.token_hex(4)}/tree/{notebook}", reset=None)
