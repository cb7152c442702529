"""The one-machine rendezvous file, with waits that wake when the file changes.

torch's FileStore (what the ranks of a one-machine launch meet in: system/store.py says why a file)
waits for a key by re-reading the file every 10 ms. A launch waits for keys a few times before the
user's function runs (all ranks here: worker/entry.py's start; each rank's address in gloo's
connect), so each launch paid about 5 ms per wait on average, 10-15 ms in all, a third of a warm
pool relaunch (issue 38: two forked ranks meeting 100 times in a FileStore took 5.1 ms a meeting;
in this store 0.14 ms).

This store keeps the FileStore for every read and write (same file, same format, same locking) and
only changes how a wait waits: Linux's inotify says when the file was written, and the wait then
reads it again. Where inotify cannot be had (another OS, the per-user limit reached), a wait polls
at 1 ms. Either way a wait also re-reads at least every 50 ms, so a missed event costs latency,
never correctness.

torch calls a Python store through its trampoline (the C++ names getNumKeys and deleteKey, a wait
with or without a timeout, clone), so gloo's connect and every new_group use it like any store.
torch is imported only when a store is made (system/ stays torch-free at import).
"""

from __future__ import annotations

import ctypes
import datetime
import functools
import os
import select
import time
from typing import Any

IN_MODIFY = 0x00000002  # <sys/inotify.h>: the file was written
RECHECK_SECONDS = 0.05  # re-read the file at least this often while waiting, event or not
POLL_SECONDS = 0.001  # between two reads where inotify is not available
_NOT_WATCHED, _CANNOT_WATCH = -1, -2  # a store's watch before its first wait; none to be had


_LIVE: list[Any] = []  # every store made in this process, kept for the process's life (below)


def waking_file_store(path: str, timeout_s: float) -> Any:
    """A store on the rendezvous file at `path` whose waits wake on a write (see the module).

    Kept alive for the rest of the process: torch's process groups hold the C++ half of a Python
    store, and once the Python object is collected (the caller's variable gone) every call from C++
    fails with "Not implemented" (seen in DeviceMesh's new_group). A worker makes one or two."""
    store = _store_class()(path, timeout_s)
    _LIVE.append(store)
    return store


def _watch(path: str) -> int:
    """An inotify descriptor that becomes readable when `path` is written, or -1 (none to be had)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = int(libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC))
    except (OSError, AttributeError):
        return -1
    if fd < 0:
        return -1
    if libc.inotify_add_watch(fd, os.fsencode(path), IN_MODIFY) < 0:
        os.close(fd)
        return -1
    return fd


@functools.cache
def _store_class() -> type:
    from torch.distributed import DistStoreError, FileStore, Store

    class WakingFileStore(Store):  # type: ignore[misc]  # torch's Store is an untyped pybind class
        """torch's FileStore for every read and write; waits that wake on a write to the file."""

        def __init__(self, path: str, timeout_s: float) -> None:
            super().__init__()
            self._path = path
            self._timeout_s = timeout_s
            self._file = FileStore(path, -1)  # -1: never removed by a count of users
            self._file.set_timeout(datetime.timedelta(seconds=timeout_s))
            self._notify = _NOT_WATCHED  # watched from the first wait that has to wait
            self.set_timeout(datetime.timedelta(seconds=timeout_s))

        def __del__(self) -> None:
            if self._notify >= 0:
                os.close(self._notify)

        # ------------------------------------------------------- reads and writes: the file's
        def set(self, key: str, value: Any) -> None:
            self._file.set(key, value)

        def get(self, key: str) -> bytes:
            self.wait([key])
            return bytes(self._file.get(key))

        def add(self, key: str, value: int) -> int:
            return int(self._file.add(key, value))

        def compare_set(self, key: str, expected: Any, desired: Any) -> bytes:
            return bytes(self._file.compare_set(key, expected, desired))

        def check(self, keys: list[str]) -> bool:
            return bool(self._file.check(keys))

        def getNumKeys(self) -> int:  # noqa: N802 - the name torch's trampoline calls
            return int(self._file.num_keys())

        def deleteKey(self, key: str) -> bool:  # noqa: N802 - the name torch's trampoline calls
            return bool(self._file.delete_key(key))

        def clone(self) -> Any:
            return waking_file_store(self._path, self._timeout_s)

        # ------------------------------------------------------------------- the wait
        def wait(self, keys: list[str], timeout: datetime.timedelta | None = None) -> None:
            limit = self._timeout().total_seconds() if timeout is None else timeout.total_seconds()
            deadline = time.monotonic() + limit
            while not self._file.check(keys):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DistStoreError(
                        f"Timed out after {limit:.0f} s waiting for the keys {keys} in the rendezvous "
                        f"file {self._path}: a rank never wrote them (it failed or never started)."
                    )
                self._sleep_until_written(min(left, RECHECK_SECONDS))

        def _timeout(self) -> datetime.timedelta:
            """The store's timeout, as set_timeout (ours or torch's) left it."""
            return getattr(self, "timeout")  # noqa: B009 - torch's Store property, unknown to its stubs

        def _sleep_until_written(self, most: float) -> None:
            if self._notify == _NOT_WATCHED:
                watch = _watch(self._path)
                self._notify = watch if watch >= 0 else _CANNOT_WATCH  # asked once per store
                return  # from now on: read the file once more before sleeping
            if self._notify == _CANNOT_WATCH:
                time.sleep(min(most, POLL_SECONDS))
                return
            select.select([self._notify], [], [], most)
            try:
                os.read(self._notify, 4096)  # the events themselves say nothing more
            except BlockingIOError:
                pass

    return WakingFileStore
