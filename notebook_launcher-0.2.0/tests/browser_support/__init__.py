"""Helpers for the browser tests: an isolated JupyterLab server and Playwright-driven Chromium."""

from pathlib import Path

import pytest

from .jupyterlab import CHROMIUM

# What every browser test module sets as its pytestmark: marked, slow, skipped without Chromium.
BROWSER_TEST = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} missing: apt-get install -y chromium"
    ),
]
# Screenshots and traces the browser tests keep
ARTIFACTS = Path(__file__).resolve().parent.parent.parent / "test-artifacts"

# A browser test that checks behaviour of ours no Jupyter shell changes runs in JupyterLab 4 only
# (conftest's `lab` fixture runs the others in Notebook 7 too).
JUPYTERLAB_ONLY = pytest.mark.parametrize("lab", ["lab"], indirect=True, ids=["jupyterlab4"])
