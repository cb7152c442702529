"""Issue 34: the launcher needs no torch. A fresh interpreter that imports notebook_launcher.launch
and launches functions which import no torch (each start method, a failure, one process) still has
no `torch` in sys.modules at the end: the kernel's side reads workers' records from records/, makes
its contexts from Python's multiprocessing, counts GPUs without torch where there is no NVIDIA
driver, and warms nothing up for a kernel that never imported torch."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = """
import json, sys
import notebook_launcher.launch
from notebook_launcher import WorkerError, notebook_launch

def double(x):
    return x * 2

def fails():
    raise ValueError("no torch here")

if __name__ == "__main__":
    seen = {"after import": "torch" in sys.modules}
    for method in ("auto", "fork", "spawn", "forkserver"):
        values = list(notebook_launch(double, args=(21,), num_processes=2, quiet=True, start_method=method))
        seen[method] = ("torch" in sys.modules, values)
    try:
        notebook_launch(fails, num_processes=2, quiet=True)
    except WorkerError as error:
        seen["failure"] = ("torch" in sys.modules, error.exc_type)
    seen["one process"] = ("torch" in sys.modules, list(notebook_launch(double, args=(1,), num_processes=1, quiet=True)))
    print(json.dumps(seen))
"""


def test_launches_of_torch_free_functions_leave_torch_out_of_the_kernel(tmp_path):
    script = tmp_path / "launch_without_torch.py"
    script.write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {
        "after import": False,
        "auto": [False, [42, 42]],
        "fork": [False, [42, 42]],
        "spawn": [False, [42, 42]],
        "forkserver": [False, [42, 42]],
        "failure": [False, "ValueError"],
        "one process": [False, [2]],
    }


def test_with_torch_loaded_a_failure_is_still_a_child_failed_error(tmp_path):
    """The other side of the rule: a kernel that imported torch gets torch elastic's class, as code
    written for Accelerate expects (its `except ChildFailedError`)."""
    script = tmp_path / "launch_with_torch.py"
    script.write_text(
        "import torch\n"
        "from torch.distributed.elastic.multiprocessing.errors import ChildFailedError\n"
        "from notebook_launcher import notebook_launch\n"
        "def fails():\n    raise ValueError('boom')\n"
        "try:\n    notebook_launch(fails, num_processes=2, quiet=True)\n"
        "except ChildFailedError as error:\n    print('caught', error.exc_type, error.rank in error.failures)\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1] == "caught ValueError True"
