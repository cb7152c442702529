"""One log file per rank with everything it printed, in a directory only this user can read.

The cell shows a bounded amount of each rank's output (output.py); these files (and result.logs)
keep all of it. They live under $XDG_RUNTIME_DIR or the temp directory, in a
`notebook_launcher-<uid>` directory of mode 0700 that must belong to this user (a directory
someone else made there is refused, not used), one subdirectory per launch; the oldest launches
beyond KEEP_RUNS are removed.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import time
from pathlib import Path
from typing import IO

from ...system.private_files import is_private_dir

KEEP_RUNS = 20


def private_root() -> Path:
    """The user's own log directory, created 0700; refuses one that is not safely this user's."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    if not base or not os.access(base, os.W_OK):
        base = tempfile.gettempdir()
    root = Path(base) / f"notebook_launcher-{os.getuid()}"
    root.mkdir(mode=0o700, exist_ok=True)
    info = os.lstat(root)
    if stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) & 0o077:
        os.chmod(root, 0o700)  # ours, but opened up since (a umask, a chmod): private again
    if not is_private_dir(str(root)):
        raise PermissionError(
            f"{root} exists but is not a directory owned by you; remove it so the per-rank logs can be kept there"
        )
    return root


class RankLogs:
    """Append-only files `rank<N>.log`, opened on a rank's first line; `close()` at the end."""

    def __init__(self) -> None:
        self.directory: Path | None = None
        self._files: dict[int, IO[str]] = {}
        self.failed: str | None = None  # why no files are kept (the cell says it once)

    def _run_directory(self) -> Path | None:
        if self.directory is None and self.failed is None:
            try:
                root = private_root()
                stamp = time.strftime("%Y%m%d-%H%M%S")
                self.directory = Path(tempfile.mkdtemp(prefix=f"{stamp}-", dir=root))
                _prune(root)
            except OSError as exc:
                self.failed = f"{type(exc).__name__}: {exc}"
        return self.directory

    def path(self, rank: int) -> Path | None:
        directory = self._run_directory()
        return None if directory is None else directory / f"rank{rank}.log"

    def write(self, rank: int, text: str) -> None:
        handle = self._files.get(rank)
        if handle is None:
            path = self.path(rank)
            if path is None:
                return
            handle = self._files[rank] = open(path, "a", encoding="utf-8", buffering=1 << 16)  # noqa: SIM115
        handle.write(text)

    def flush(self) -> None:
        for handle in self._files.values():
            handle.flush()

    def close(self) -> None:
        for handle in self._files.values():
            handle.close()
        self._files.clear()


def _prune(root: Path) -> None:
    """Keep the newest KEEP_RUNS launches' logs."""
    runs = sorted((p for p in root.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
    for old in runs[:-KEEP_RUNS]:
        shutil.rmtree(old, ignore_errors=True)
