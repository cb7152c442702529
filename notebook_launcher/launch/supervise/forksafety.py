"""Make the kernel safe to fork after it already ran multi-threaded torch code.

GNU OpenMP keeps a pool of worker threads; a forked child inherits the pool's bookkeeping but not
its threads, so the child's first parallel region with more than one thread waits forever (seen
here: a notebook that ran one matmul before launching hung every worker). Pausing the OpenMP
runtime (OpenMP 5 `omp_pause_resource_all`) releases the pool; the kernel's next parallel region
simply starts fresh threads.
"""

from __future__ import annotations

import ctypes
import re
import sys

_OMP_PAUSE_SOFT = 1
_libs: list[ctypes.CDLL] | None = None


def _openmp_runtimes() -> list[ctypes.CDLL]:
    global _libs
    if _libs is None:
        _libs = []
        if sys.platform.startswith("linux"):
            with open("/proc/self/maps") as maps:
                paths = sorted(set(re.findall(r"/\S*lib(?:gomp|iomp5|omp)\S*\.so\S*", maps.read())))
            for path in paths:
                try:
                    lib = ctypes.CDLL(path)
                    lib.omp_pause_resource_all  # noqa: B018 - probe the symbol
                    _libs.append(lib)
                except (OSError, AttributeError):
                    continue
    return _libs


def release_openmp_threads() -> None:
    """Release every loaded OpenMP runtime's thread pool right before forking workers."""
    global _libs
    if _libs is not None and not _libs:
        _libs = None  # torch may have loaded its OpenMP runtime since the last look
    for lib in _openmp_runtimes():
        lib.omp_pause_resource_all(_OMP_PAUSE_SOFT)


class HelperProcesses:
    """Spawn and forkserver start helper processes (resource tracker, fork server) that outlive a
    launch; stop the ones this launch started, so the kernel is left with no child process."""

    def __init__(self) -> None:
        from multiprocessing import forkserver, resource_tracker

        self._helpers = [resource_tracker._resource_tracker, forkserver._forkserver]
        self._running_before = [self._is_running(h) for h in self._helpers]

    @staticmethod
    def _is_running(helper: object) -> bool:
        return (
            getattr(helper, "_fd", None) is not None or getattr(helper, "_forkserver_pid", None) is not None
        )

    def stop_new(self) -> None:
        for helper, was_running in zip(self._helpers, self._running_before, strict=True):
            if not was_running and self._is_running(helper) and hasattr(helper, "_stop"):
                try:
                    helper._stop()
                except Exception:
                    pass
