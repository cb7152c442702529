"""Every error this package raises on purpose, so users can catch them by name."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class NotebookLauncherError(Exception):
    """Base class of every error raised on purpose by notebook_launcher."""


class ConfigError(NotebookLauncherError, ValueError):
    """A launch setting has a value we cannot use; the message names the setting and the fix."""


class AcceleratorError(NotebookLauncherError, RuntimeError):
    """The Accelerator was used in a way it cannot support (e.g. backward before prepare)."""


class AcceleratorValueError(AcceleratorError, ValueError):
    """An Accelerator method got a value it cannot use, where Accelerate raises ValueError: code written
    for Accelerate that catches ValueError still catches it."""


class DistributedOperationException(AcceleratorError):
    """Ranks passed mismatched tensors to a collective (debug mode); Accelerate's name."""


class HardwareError(NotebookLauncherError, RuntimeError):
    """The machine cannot do what was asked (e.g. fp8 without a capable GPU)."""


class NetworkError(NotebookLauncherError, ConnectionError):
    """This machine cannot reach the main machine's address and port; the message names both."""


class ClusterEnvironmentError(AcceleratorError):
    """A scheduler's variables (torchrun, SLURM, MPI, Kubernetes) are partial or contradict each
    other; the message names the variables, so a run never falls back to a silent world of one."""


class WorkerWidgetError(NotebookLauncherError, RuntimeError):
    """An ipywidget was created on a rank, which has no connection to the notebook's page; the
    message lists what a rank can show (print, tqdm progress bars, display())."""


def closest(name: str, choices: Iterable[str]) -> str:
    """Return ' Did you mean X?' for the nearest choice, or '' when nothing is close."""
    match = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.5)
    return f" Did you mean {match[0]!r}?" if match else ""


def install_hint(package: str, extra: str) -> str:
    """The install command for an optional package. No release is on PyPI yet, so the extra is named
    as a clone installs it ('.[ray]' from the repository root), beside the package's own name."""
    return f"pip install {package} (or pip install '.[{extra}]' from a notebook_launcher clone)"


def bad_value(field: str, value: object, allowed: Iterable[object], hint: str = "") -> ConfigError:
    """Build the standard 'field got X, allowed: ...' error."""
    allowed = list(allowed)
    shown = ", ".join(repr(a) for a in allowed)
    suggestion = closest(str(value), [str(a) for a in allowed]) if isinstance(value, str) else ""
    msg = f"{field}={value!r} is not valid; allowed values: {shown}.{suggestion}"
    return ConfigError(msg + (f" {hint}" if hint else ""))
