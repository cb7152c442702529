"""Private files for a run: a directory only this user can read and write, and files written there
without trusting what a name already holds.

On a shared machine (JupyterHub, a login node) the temp directory is writable by everyone: a file
found there under a predictable name may have been planted by another user. So every file the
launcher writes for a run goes into a run directory made with mode 0700 (mkdtemp), which the
launcher removes when the run ends; workers find it through RUN_DIR_ENV and check it before use.
A process that runs without a launcher (a plain script) makes its own and removes it at exit.
"""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import tempfile
import threading

from ..records.names import RUN_DIR_ENV

PREFIX = "notebook_launcher-"

_own: str | None = None
_lock = threading.Lock()


def make_private_dir(prefix: str = PREFIX) -> str:
    """A new directory in the temp directory that only this user can enter (mode 0700).

    mkdtemp never reuses an existing name and creates the directory 0700 whatever the umask."""
    return tempfile.mkdtemp(prefix=prefix)


def is_private_dir(path: str) -> bool:
    """True for a real directory (no symlink) owned by this user that nobody else may touch."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return (
        stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) & 0o077 == 0
    )


def run_dir() -> str:
    """This run's private directory: the launcher's (RUN_DIR_ENV) when it is private, else one of
    this process's own, removed when the interpreter exits."""
    given = os.environ.get(RUN_DIR_ENV)
    if given and is_private_dir(given):
        return given
    global _own
    with _lock:
        if _own is None or not is_private_dir(_own):
            _own = make_private_dir()
            atexit.register(shutil.rmtree, _own, True)
        return _own


def write_private(directory: str, name: str, text: str) -> str:
    """Write `text` to directory/name (mode 0600) and return the path. The content is always
    written anew, so whatever the name held before is never used."""
    path = os.path.join(directory, name)
    partial = f"{path}.{os.getpid()}.{threading.get_ident()}.partial"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(partial, flags, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(partial, path)
    except BaseException:
        if os.path.exists(partial):
            os.unlink(partial)
        raise
    return path
