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
    # The warm pool (launch/pool.py) outlives a launch on purpose; end it so that every test still
    # proves it leaves nothing else behind, and that releasing the pool leaves nothing either.
    pool = sys.modules.get("notebook_launcher.launch.pool")
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
