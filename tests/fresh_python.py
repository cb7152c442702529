"""Code run in a fresh interpreter, for the tests that must see what an import or a launch leaves
in a new process (torch in sys.modules or not): nothing of the test process carries over."""

from __future__ import annotations

import subprocess
import sys


def last_line(code: str, cwd: str | None = None, timeout: float = 300) -> str:
    """Run `code` with `python -c` in a fresh interpreter; it must succeed; its last printed line."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, cwd=cwd
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    return lines[-1] if lines else ""
