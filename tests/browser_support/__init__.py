"""Helpers for the browser tests: an isolated JupyterLab server and Playwright-driven Chromium."""

import pytest

# A browser test that checks behaviour of ours no Jupyter shell changes runs in JupyterLab 4 only
# (conftest's `lab` fixture runs the others in Notebook 7 too).
JUPYTERLAB_ONLY = pytest.mark.parametrize("lab", ["lab"], indirect=True, ids=["jupyterlab4"])
