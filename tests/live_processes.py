"""Which processes still run, for the tests that check nothing was left behind (no tests here).

A process can end between being listed and being looked at; psutil then raises NoSuchProcess, which
means "gone", never an error. A zombie has ended too (its parent has not reaped it yet)."""

from __future__ import annotations

import psutil


def is_live(process: psutil.Process) -> bool:
    """Running and not a zombie; False for one that ended, however late it is asked."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def pid_is_live(pid: int) -> bool:
    try:
        return is_live(psutil.Process(pid))
    except psutil.NoSuchProcess:
        return False


def live_children(process: psutil.Process | None = None) -> list[psutil.Process]:
    """The live descendants of `process` (this one by default); [] when it has ended itself."""
    try:
        children = (process or psutil.Process()).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return [child for child in children if is_live(child)]
