"""The local single-node SLURM for the tests (no tests here): `local_slurm()` runs
scripts/slurm/start.sh once per test session (a real try: install, configure, start munge,
slurmctld and slurmd) and skips with the script's own explanation when SLURM cannot start here."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
START = ROOT / "scripts" / "slurm" / "start.sh"
_OUTCOME: dict[str, str | None] = {}


def local_slurm() -> None:
    """Make sure the local SLURM runs; pytest.skip (with the reason printed) when it cannot."""
    if "reason" not in _OUTCOME:
        _OUTCOME["reason"] = _start()
    reason = _OUTCOME["reason"]
    if reason:
        print(f"local SLURM unavailable: {reason}")
        pytest.skip(f"local SLURM unavailable: {reason}")


def _start() -> str | None:
    if os.geteuid() != 0 and shutil.which("sinfo") is None:
        return "not root and no SLURM installed (scripts/slurm/start.sh needs root to set one up)"
    try:
        done = subprocess.run(["bash", str(START)], capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return "scripts/slurm/start.sh did not finish within 10 minutes"
    if done.returncode != 0:
        return f"scripts/slurm/start.sh failed (exit {done.returncode}): {(done.stderr or done.stdout).strip()[-2000:]}"
    return None


def slurm_jobs(name_prefix: str) -> list[str]:
    """Ids of this user's jobs still known to SLURM as pending or running whose name starts with the prefix."""
    done = subprocess.run(
        ["squeue", "-h", "-o", "%i %j %T"], capture_output=True, text=True, timeout=30, check=True
    )
    return [
        line.split()[0]
        for line in done.stdout.splitlines()
        if len(line.split()) >= 2 and line.split()[1].startswith(name_prefix)
    ]
