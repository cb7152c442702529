import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

# Tests must not pick up a developer's own default config file.
os.environ.setdefault("XDG_CONFIG_HOME", str(ROOT / ".pytest-xdg-config"))


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    from kernel_session import KernelSession

    session = KernelSession(cwd=str(tmp_path_factory.mktemp("kernel")))
    yield session
    session.close()


@pytest.fixture(autouse=True)
def _no_leftover_children():
    """Every test must leave no child process of the test runner behind."""
    import psutil

    before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield
    # The warm pool (launch/warm/pool.py) outlives a launch on purpose; end it so that every test still
    # proves it leaves nothing else behind, and that releasing the pool leaves nothing either.
    pool = sys.modules.get("notebook_launcher.launch.warm.pool")
    if pool is not None:
        pool.release_warm_pool()
    import time

    deadline = time.monotonic() + 5
    while True:
        extra = [
            p for p in psutil.Process().children(recursive=True) if p.pid not in before and p.is_running()
        ]
        extra = [p for p in extra if p.status() != psutil.STATUS_ZOMBIE]
        if not extra or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not extra, f"test left child processes running: {[(p.pid, p.name()) for p in extra]}"


# Browser tests (test_browser_panel, test_interactive_browser): each module gives its own `notebook_dir`
# (the notebooks) and `scratch` (a temp dir of its own); these two are shared.
@pytest.fixture(scope="module", params=["lab", "notebook"], ids=["jupyterlab4", "notebook7"])
def lab(notebook_dir, scratch, request):
    """A real Jupyter server over `notebook_dir`: browser tests run in JupyterLab 4 and again in
    Notebook 7 (the same front-end code paths for widgets and outputs, another shell), except those
    marked browser_support.JUPYTERLAB_ONLY, which check behaviour of ours that no shell changes (the suite's time)."""
    from browser_support.lab_server import LabServer

    if request.param == "notebook":
        pytest.importorskip("notebook", minversion="7")
    with LabServer(notebook_dir, scratch / f"{request.param}-server", app=request.param) as server:
        yield server


@pytest.fixture(scope="module")
def playwright():
    playwright_api = pytest.importorskip("playwright.sync_api")
    with playwright_api.sync_playwright() as running:
        yield running


# The fast tier (`python -m pytest -m "not slow"`, < 3 min on 2 cores; README): these files, which
# check every room without long process-group runs. Every test elsewhere is marked slow here
# (reason: its file starts real process groups, kernels, a browser, a cluster or fresh venvs for most
# of its tests; seconds to minutes each), besides the tests marked slow by hand (> ~20 s each).
FAST_FILES = {
    "test_architecture.py",  # the house: import rules, module sizes
    "test_packaging.py",  # declared dependencies, the version (its venv test is slow)
    "test_binder.py",
    "test_migration_doc.py",
    "test_config.py",  # config/
    "test_sharding_config.py",
    "test_cluster_config.py",  # clusters/ (settings, refusals)
    "test_network.py",  # system/
    "test_environments.py",  # runtime/world: which world a script runs in
    "test_estimate_memory.py",  # estimate/
    "test_cli_units.py",  # cli/
    "test_cli_bad_input.py",
    "test_accelerate_api.py",  # runtime/accelerator
    "test_accelerate_imports.py",  # the public faces
    "test_accelerator.py",  # runtime + launch: real 2-process launches
    "test_launch_tail.py",  # launch: many relaunches, none with a tail
    "test_trackers_units.py",  # runtime/trackers
    "test_hang_report.py",  # launch/supervise
    "test_interactive.py",  # interactive/
    "test_widgets_config_panel.py",  # widgets/
    "test_widgets_run_view.py",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name not in FAST_FILES:
            item.add_marker(pytest.mark.slow)
