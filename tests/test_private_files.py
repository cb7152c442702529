"""Every file a launch writes for a run lives in a directory only the user can enter, is never
trusted because of its name, and is gone when the run ends (issue 23, part 2).

Each test points the temp directory (TMPDIR and tempfile's cached choice) at a fresh tmp_path, so
what a launch leaves there can be listed; workers report the modes of what exists while they run.
"""

import hashlib
import json
import os
import stat
import subprocess
import sys
import tempfile
import textwrap

import pytest

from notebook_launcher import notebook_launch
from notebook_launcher.records.names import RUN_DIR_ENV

TIMEOUT = 240
DS_CONFIG = {"zero_optimization": {"stage": 2}, "gradient_clipping": 0.0}


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """A fresh, empty temp directory for this test's launch (and the workers it forks or starts)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


def _what_exists() -> dict:
    """In a worker: the run directory's mode and owner, and the modes of the files in it."""
    run_dir = os.environ[RUN_DIR_ENV]
    info = os.lstat(run_dir)
    files = {}
    for root, _, names in os.walk(run_dir):
        for name in names:
            path = os.path.join(root, name)
            files[os.path.relpath(path, run_dir)] = stat.S_IMODE(os.lstat(path).st_mode)
    return {
        "run_dir": run_dir,
        "mode": stat.S_IMODE(info.st_mode),
        "is_dir": stat.S_ISDIR(info.st_mode),
        "mine": info.st_uid == os.geteuid(),
        "files": files,
        "tmp": tempfile.gettempdir(),
    }


def _deepspeed_run() -> dict:
    """A DeepSpeed run configured by a dict (DeepSpeedPlugin(hf_ds_config={...})): which stage the
    engine got, where the config was written, and what the run directory holds meanwhile."""
    import torch

    from notebook_launcher import Accelerator
    from notebook_launcher.utils import DeepSpeedPlugin

    accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=dict(DS_CONFIG)))
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(torch.randn(8, 4), batch_size=2)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x in loader:
        accelerator.backward(model(x).sum())
        optimizer.step()
        optimizer.zero_grad()
    seen = _what_exists()
    seen["stage"] = model.zero_optimization_stage()
    seen["config_file"] = accelerator.config.deepspeed_config.deepspeed_config_file
    return seen


def _old_shared_path(config: dict) -> str:
    """Where the launcher used to write (and reuse) a dict config: a name anyone can compute."""
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), f"notebook_launcher-deepspeed-{digest}.json")


def _left_in(tmp) -> list[str]:
    """What a launch left in the temp directory, less torch's compile cache (torchinductor_<user>,
    made by torch when DeepSpeed imports torch._inductor, and kept across runs by design) and the
    user's own rank logs (launch/cell/rank_logs.py: output kept on purpose, the last 20 launches, in
    a 0700 directory of this user's, checked here)."""
    logs = os.path.join(tmp, f"notebook_launcher-{os.getuid()}")
    if os.path.exists(logs):
        info = os.lstat(logs)
        assert info.st_uid == os.getuid() and (info.st_mode & 0o777) == 0o700, oct(info.st_mode)
    return sorted(
        name
        for name in os.listdir(tmp)
        if not name.startswith("torchinductor_") and name != f"notebook_launcher-{os.getuid()}"
    )


def _assert_private(seen: dict, tmp) -> None:
    assert seen["tmp"] == str(tmp)
    assert os.path.dirname(seen["run_dir"]) == str(tmp)
    assert seen["is_dir"] and seen["mine"] and seen["mode"] == 0o700, seen  # what is inside: ours alone


@pytest.mark.slow  # ~35 s on a busy 2-core machine: DeepSpeed's engine in two processes
def test_a_planted_deepspeed_config_is_not_used_and_nothing_is_left(private_tmp):
    pytest.importorskip("deepspeed")
    planted = _old_shared_path(DS_CONFIG)
    with open(planted, "w") as fp:  # another user's file, first: ZeRO stage 1 and clipping at 1.0
        json.dump({"zero_optimization": {"stage": 1}, "gradient_clipping": 1.0}, fp)

    result = notebook_launch(_deepspeed_run, num_processes=2, start_method="fork", timeout=TIMEOUT)

    for seen in result:
        assert seen["stage"] == 2, seen
        assert os.path.dirname(seen["config_file"]) == seen["run_dir"]
        assert seen["files"][os.path.basename(seen["config_file"])] == 0o600
        _assert_private(seen, private_tmp)
    assert result[0]["run_dir"] == result[1]["run_dir"]
    assert _left_in(private_tmp) == [os.path.basename(planted)]  # only the planted file


def test_a_fork_launch_leaves_nothing_in_the_temp_directory(private_tmp):
    result = notebook_launch(_what_exists, num_processes=2, start_method="fork", timeout=TIMEOUT)
    for seen in result:
        _assert_private(seen, private_tmp)
        # the collective records, and the file the ranks met in (system/store.py)
        assert set(seen["files"]) <= {"rank0", "rank1", "rendezvous.attempt0"}
        assert all(mode == 0o600 for mode in seen["files"].values()), seen["files"]
    assert _left_in(private_tmp) == []


SCRIPT = textwrap.dedent(
    """
    import json, os, stat, sys
    from notebook_launcher import Accelerator
    accelerator = Accelerator()
    run_dir = os.environ["NOTEBOOK_LAUNCHER_RUN_DIR"]
    files = {}
    for root, _, names in os.walk(run_dir):
        for name in names:
            path = os.path.join(root, name)
            files[os.path.relpath(path, run_dir)] = stat.S_IMODE(os.lstat(path).st_mode)
    info = os.lstat(run_dir)
    print("SEEN " + json.dumps({"run_dir": run_dir, "mode": stat.S_IMODE(info.st_mode),
                               "is_dir": stat.S_ISDIR(info.st_mode), "mine": info.st_uid == os.geteuid(),
                               "files": files, "tmp": os.environ["TMPDIR"]}))
    accelerator.wait_for_everyone()
    """
)


@pytest.mark.slow  # ~30 s on a busy 2-core machine: torchrun and a worker importing torch
def test_a_cli_launch_keeps_its_files_private_and_leaves_nothing(private_tmp, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-m", "notebook_launcher", "launch", "--cpu", "--num_processes", "1", str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    seen = [json.loads(line.split("SEEN ", 1)[1]) for line in done.stdout.splitlines() if "SEEN " in line]
    assert len(seen) == 1, done.stdout
    for one in seen:
        _assert_private(one, private_tmp)
        assert any(path.startswith("logs" + os.sep) for path in one["files"]), one["files"]  # torchrun's
    assert _left_in(private_tmp) == []
