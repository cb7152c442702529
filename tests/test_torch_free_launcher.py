"""Issue 34: the launcher needs no torch where nothing needs it. A fresh interpreter imports
notebook_launcher.launch without torch, and launches that do not fork (spawn, the warm pool) of
functions that import no torch leave `torch` out of sys.modules: the kernel's side reads workers'
records from records/, makes its contexts from Python's multiprocessing and counts GPUs without
torch where there is no NVIDIA driver. A forked launch imports torch in the parent on purpose
(warm/warmup.py): every worker imports the runtime, and torch with it, before the function runs,
and a parent without it would make each relaunch pay that in every worker."""

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
    for method in ("spawn", "forkserver"):
        values = list(notebook_launch(double, args=(21,), num_processes=2, quiet=True, start_method=method))
        seen[method] = ("torch" in sys.modules, values)
    try:
        notebook_launch(fails, num_processes=2, quiet=True, start_method="spawn")
    except WorkerError as error:
        seen["failure"] = ("torch" in sys.modules, error.exc_type)
    seen["one process"] = (
        "torch" in sys.modules, list(notebook_launch(double, args=(1,), num_processes=1, quiet=True, start_method="spawn"))
    )
    seen["fork"] = (list(notebook_launch(double, args=(21,), num_processes=2, quiet=True)), "torch" in sys.modules)
    print(json.dumps(seen))
"""


def test_the_launcher_and_launches_that_do_not_fork_leave_torch_out_of_the_kernel(tmp_path):
    seen = json.loads(_last_line_of(tmp_path, SCRIPT))
    assert seen == {
        "after import": False,
        "spawn": [False, [42, 42]],
        "forkserver": [False, [42, 42]],
        "failure": [False, "ValueError"],
        "one process": [False, [2]],
        "fork": [[42, 42], True],  # warmed up on purpose, see above
    }


def test_with_torch_loaded_a_failure_is_still_a_child_failed_error(tmp_path):
    """The other side of the rule: a kernel that imported torch gets torch elastic's class, as code
    written for Accelerate expects (its `except ChildFailedError`)."""
    last = _last_line_of(
        tmp_path,
        "import torch\n"
        "from torch.distributed.elastic.multiprocessing.errors import ChildFailedError\n"
        "from notebook_launcher import notebook_launch\n"
        "def fails():\n    raise ValueError('boom')\n"
        "try:\n    notebook_launch(fails, num_processes=2, quiet=True)\n"
        "except ChildFailedError as error:\n    print('caught', error.exc_type, error.rank in error.failures)\n",
    )
    assert last == "caught ValueError True"


def _last_line_of(tmp_path, code: str) -> str:
    """Run `code` as a script in a fresh interpreter; it must succeed; its last printed line."""
    script = tmp_path / "launch.py"
    script.write_text(code)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip().splitlines()[-1]
