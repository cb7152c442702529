"""A launch that forks while another thread of the process warms up (imports torch._dynamo) must not
hand its ranks a held import lock (system/fork_lock.py). Found as a hang: two machines rehearsed in
two threads of a fresh process; rank 0 waited in init_process_group's import of torch._dynamo until
the launch's timeout, every time."""

from __future__ import annotations

import pytest
from fresh_python import last_line

pytestmark = pytest.mark.slow  # a fresh interpreter that imports torch and torch._dynamo (~5 s)

_SCRIPT = """
import sys, threading, time
import torch
from notebook_launcher import notebook_launch
from notebook_launcher.launch.warm import warmup

def joins():
    from notebook_launcher import Accelerator
    Accelerator().wait_for_everyone()  # init_process_group imports torch._dynamo
    return "joined"

if __name__ == "__main__":
    assert "torch._dynamo" not in sys.modules
    importer = threading.Thread(target=warmup.warm_up)  # outside a kernel: imports torch._dynamo now
    importer.start()
    while "torch._dynamo" not in sys.modules:
        time.sleep(0.0005)
    importing = importer.is_alive()
    result = notebook_launch(joins, num_processes=2, start_method="fork", quiet=True, timeout=60)
    importer.join()
    print(importing, list(result))
"""


def test_a_launch_started_while_another_thread_imports_torch_dynamo_runs(tmp_path):
    script = tmp_path / "fork_during_import.py"
    script.write_text(_SCRIPT)
    # The launch began while the other thread was inside the import, and its ranks joined.
    assert last_line(f"exec(open({str(script)!r}).read())", cwd=str(tmp_path), timeout=240) == (
        "True ['joined', 'joined']"
    )
