"""How a notebook launch's workers start: fork when safe, else a warm process server."""

from __future__ import annotations

import sys

from ..errors import ConfigError
from ..system import hardware

START_METHODS = ("auto", "fork", "spawn", "forkserver")


def choose_start_method(requested: str) -> tuple[str, str | None]:
    """(method, a line to say or None). Fork on Linux unless this process already holds CUDA (or its
    driver), whose state a forked child cannot use; then the warm pool's forkserver."""
    if requested not in START_METHODS:
        raise ConfigError(
            f"start_method={requested!r} is not valid; choose one of {', '.join(START_METHODS)}."
        )
    if requested in ("spawn", "forkserver"):
        return requested, None  # no fork of this process: its CUDA state does not matter
    unsafe = hardware.cuda_fork_hazard()
    if unsafe is None and not sys.platform.startswith("linux"):
        unsafe = f"fork is not safe on {sys.platform}"
    if requested == "fork" and unsafe:
        raise ConfigError(
            f"start_method='fork' cannot be used: {unsafe}, and forked workers would crash when they touch the "
            "GPU. Use start_method='auto' (or 'spawn'): the function is then sent to fresh processes with "
            "cloudpickle, no kernel restart needed."
        )
    if requested == "fork" or not unsafe:
        return "fork", None
    return (
        "forkserver",
        f"{unsafe}; starting workers from a warm process server instead of forking "
        "(function sent with cloudpickle; `release_warm_pool()` ends the server).",
    )
