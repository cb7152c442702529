"""A fresh venv holding the built wheel and only what it declares (no test helpers here).

Shared by tests/test_packaging.py (the bare install) and scripts/check_extras.py (one venv per
extra). torch goes in first, pinned, through scripts/install_torch.sh (the CPU build on a machine
without an NVIDIA driver): an unpinned torch would pull a multi-GB CUDA build; pip takes the wheel
from its cache or the local folder, so a CI run downloads it once. `--system-site-packages` is never used: it
would hide a dependency the wheel forgot to declare.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SMOKE = Path(__file__).resolve().parent / "installed_smoke.py"
TORCH = os.environ.get("TORCH_VERSION", "2.13.0")


def clean_env() -> dict[str, str]:
    """The caller's environment without what would make the venv import the repo's copy, and with
    bytecode written as on a user's machine: the venv is installed without .pyc files, and where
    PYTHONDONTWRITEBYTECODE is set (this project's machines) every process would compile torch again."""
    dropped = ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def build(outdir: Path) -> tuple[Path, Path]:
    """`python -m build`: the sdist, then the wheel built from that sdist (so the sdist is complete).

    With NOTEBOOK_LAUNCHER_DIST set (.ci/run), the sdist and wheel are built once into that folder
    and every later caller (the suite's wheel test, scripts/check_extras.py) reuses them."""
    shared = os.environ.get("NOTEBOOK_LAUNCHER_DIST")
    if shared:
        outdir = Path(shared)
        built = sorted(outdir.glob("*.tar.gz")), sorted(outdir.glob("*.whl"))
        if built[0] and built[1]:
            return built[0][-1], built[1][-1]
    subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(outdir), str(ROOT)],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
        env=clean_env(),
    )
    return next(outdir.glob("*.tar.gz")), next(outdir.glob("*.whl"))


def make_venv(where: Path, wheel: Path, extra: str = "") -> Path:
    """A venv at `where` with torch==TORCH and the wheel (with `[extra]`); returns its python."""
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=300)
    python = where / "bin" / "python"
    pip = [
        str(python),
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-compile",
    ]  # no .pyc at install: each process writes those of what it imports (clean_env keeps that on)
    # The one decision of which torch build a machine gets (and pip's cache: not downloaded twice).
    run(
        ["bash", str(ROOT / "scripts" / "install_torch.sh"), str(python), TORCH],
        timeout=900,
        TORCH_NO_COMPILE="1",
    )
    constraints = os.environ.get("NOTEBOOK_LAUNCHER_EXTRAS_CONSTRAINTS") if extra else None
    pins = ["--constraint", constraints] if constraints else []  # check_extras: pinned on purpose
    run(pip + pins + [f"{wheel}[{extra}]" if extra else str(wheel)], timeout=1800)
    return python


def smoke(python: Path, what: str, timeout: int = 1200) -> str:
    """tests/installed_smoke.py WHAT inside the venv; its output (raises with it on failure).

    DeepSpeed's compiled ops go to a folder of the venv's own: in the shared ~/.cache/torch_extensions
    this venv's build (another torch path, so another compile command) would replace the project
    venv's, which the suite's next DeepSpeed test would then compile again (minutes)."""
    extensions = python.parent.parent / "torch_extensions"
    temp = tempfile.mkdtemp(prefix="nl-smoke-")  # its TMPDIR, gone afterwards; short: sockets live there
    try:
        return run(
            [str(python), str(SMOKE), what, str(ROOT)],
            timeout=timeout,
            TORCH_EXTENSIONS_DIR=str(extensions),
            TMPDIR=temp,
        )
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def run(cmd: list[str], timeout: int, **env: str) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**clean_env(), **env})
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout[-6000:]}\n{done.stderr[-6000:]}"
        )
    return done.stdout + done.stderr
