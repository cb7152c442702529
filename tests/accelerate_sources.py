"""HuggingFace Accelerate's own unit tests (tests/*.py) and test helpers (src/accelerate/test_utils/), from
the published source distribution of the version pyproject.toml pins. They are not in Accelerate's wheel,
so they are fetched at test time with pip (`pip download --no-binary :all: --no-deps accelerate==X`) into
a per-user cache, never into this repository, and reused by later runs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def pinned_accelerate_version() -> str:
    """The version the test extras pin (`"accelerate==X"` in pyproject.toml)."""
    found = re.search(r'"accelerate==([^"]+)"', (ROOT / "pyproject.toml").read_text())
    if found is None:
        raise AssertionError("pyproject.toml's test extras no longer pin accelerate==X")
    return found.group(1)


def cache_dir() -> Path:
    """Where fetched sources are kept: $XDG_CACHE_HOME (or ~/.cache)/notebook_launcher-tests."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "notebook_launcher-tests"


def accelerate_sources(version: str) -> Path:
    """The unpacked source tree of Accelerate `version` (with tests/ and src/accelerate/test_utils/),
    downloaded on first use. Raises AssertionError with pip's words when PyPI cannot be reached."""
    target = cache_dir() / f"accelerate-{version}"
    if (target / "tests").is_dir() and (target / "src" / "accelerate" / "test_utils").is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        download = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps"]
            + ["--no-build-isolation", "--dest", scratch, f"accelerate=={version}"],
            capture_output=True,
            text=True,
            timeout=600,
        )
        archives = list(Path(scratch).glob(f"accelerate-{version}.tar.gz"))
        if download.returncode != 0 or not archives:
            raise AssertionError(
                f"could not fetch Accelerate {version}'s source distribution from PyPI (its unit tests are not "
                f"in the wheel): pip said:\n{download.stdout[-2000:]}{download.stderr[-2000:]}\nWith no network, "
                f"unpack accelerate-{version}.tar.gz so that {target}/tests exists."
            )
        unpacked = Path(scratch) / "unpacked"
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # Python >= 3.10.12
        with tarfile.open(archives[0]) as archive:
            archive.extractall(unpacked, **safe)
        if not target.exists():  # another run may have finished first: keep its copy
            shutil.move(str(unpacked / f"accelerate-{version}"), str(target))
    return target
