"""CI's gate on real components (issue 33): with CI=true, the Ray tests fail when Ray cannot be
had, instead of skipping (without CI they skip, saying why: what a developer without Ray sees).
Ray is made unimportable for a pytest run of tests/test_ray.py in a subprocess: a `ray` package on
PYTHONPATH whose import fails as a missing one does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

TESTS = Path(__file__).resolve().parent
WHY = "ray made unimportable by test_ci_gate"


def _run_ray_tests(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    broken = tmp_path / "ray"
    broken.mkdir()
    (broken / "__init__.py").write_text(f"raise ModuleNotFoundError({WHY!r})\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(CI="true", PYTHONPATH=os.pathsep.join([str(tmp_path), str(TESTS.parent)]))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(TESTS / "test_ray.py")],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=TESTS.parent,
    )


def test_ray_that_cannot_be_had_fails_the_ci_run(tmp_path):
    done = _run_ray_tests(tmp_path)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-4000:]
    assert "skipped under CI=true, which is a failure" in out and "Ray is not installed" in out, out[-4000:]
    assert "Ray: 0 passed" in out, out[-4000:]
