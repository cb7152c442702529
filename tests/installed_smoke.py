"""Checks run INSIDE a fresh venv holding the built wheel (tests/test_packaging.py, scripts/check_extras.py).

`python installed_smoke.py base REPO` runs the jobs a user of the bare install runs: the README's
quickstart, a 2-process CLI launch, notebook_launch with FSDP and a checkpoint, `notebook-launcher
env/test/--version`, every public name, and the one-line message each missing extra gives.
`python installed_smoke.py EXTRA REPO` runs what that extra enables (deepspeed, ray, slurm, notebooks).
No pytest here: the venv has only what the wheel declares. It runs from a scratch folder, so the
package imported is the installed one, never the repo's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kernel_isolation import run_notebook, start_kernel

BIN = Path(sys.executable).parent
CLI = str(BIN / "notebook-launcher")

CLI_SCRIPT = """
import torch
from notebook_launcher import Accelerator
acc = Accelerator()
total = acc.reduce(torch.tensor([float(acc.process_index + 1)]), reduction="sum")
acc.print(f"cli world={acc.num_processes} sum={total.item()}")
"""


def step(name: str, func, *args) -> None:
    start = time.monotonic()
    func(*args)
    print(f"ok   {name} ({time.monotonic() - start:.1f}s)", flush=True)


def run(cmd: list[str], expect: str = "", code: int = 0, timeout: int = 300) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    out = done.stdout + done.stderr
    if done.returncode != code or expect not in out:
        raise SystemExit(
            f"FAILED {' '.join(cmd)} (exit {done.returncode}, wanted {code} and {expect!r}):\n{out}"
        )
    return out


def installed_package() -> None:
    import notebook_launcher

    where = Path(notebook_launcher.__file__).resolve()
    if BIN.parent.resolve() not in where.parents:
        raise SystemExit(f"imported {where}, not the venv's install under {BIN.parent}")


def public_names() -> None:
    import importlib

    for module in (
        "notebook_launcher",
        "notebook_launcher.utils",
        "notebook_launcher.state",
        "notebook_launcher.tracking",
    ):
        face = importlib.import_module(module)
        for name in face.__all__:
            getattr(face, name)


def version() -> None:
    import notebook_launcher

    run([CLI, "--version"], expect=f"notebook-launcher {notebook_launcher.__version__}")
    from importlib.metadata import version as dist_version

    assert dist_version("notebook_launcher") == notebook_launcher.__version__


def quickstart(repo: Path) -> None:
    shutil.copy(repo / "quickstart.py", "quickstart.py")
    run([sys.executable, "quickstart.py"], expect="with 2 processes")


def cli_launch() -> None:
    Path("cli_train.py").write_text(CLI_SCRIPT)
    run([CLI, "launch", "--num_processes", "2", "cli_train.py"], expect="cli world=2 sum=3.0")


def env_and_test() -> None:
    run([CLI, "env"], expect="notebook_launcher version")
    run([CLI, "test", "--num_processes", "2"], timeout=600)


def fsdp_train(folder: str) -> dict:
    import torch
    from torch import nn

    from notebook_launcher import Accelerator

    acc = Accelerator()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    model, opt = acc.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-2))
    for _ in range(3):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        acc.backward(loss)
        opt.step()
        opt.zero_grad()
    acc.save_state(os.path.join(folder, "state"))
    acc.save_model(model, os.path.join(folder, "model"))
    acc.load_state(os.path.join(folder, "state"))
    return {"type": str(acc.distributed_type), "loss": loss.item()}


def notebook_fsdp() -> None:
    from notebook_launcher import notebook_launch

    folder = os.path.abspath("fsdp_run")
    fsdp = {"fsdp_auto_wrap_policy": "SIZE_BASED_WRAP", "fsdp_min_num_params": 10}
    result = notebook_launch(
        fsdp_train, args=(folder,), num_processes=2, distributed_type="FSDP", fsdp_config=fsdp, timeout=180
    )
    assert all("FSDP" in r["type"] for r in result), list(result)
    assert any(Path(folder, "model").iterdir()), "save_model wrote nothing"


def missing_extras() -> None:
    """Each optional feature, absent, names its extra in one line (no library traceback)."""
    import notebook_launcher as nl
    from notebook_launcher import ConfigError

    def refused(call, extra: str) -> None:
        try:
            call()
        except ConfigError as exc:
            assert f"'.[{extra}]' from a notebook_launcher clone" in str(exc), f"{extra}: {exc}"
            return
        raise SystemExit(f"no ConfigError without the [{extra}] extra")

    import importlib.util

    if importlib.util.find_spec("ray") is None:
        refused(lambda: nl.notebook_launch(print, cluster=nl.RayCluster()), "ray")
    if importlib.util.find_spec("submitit") is None:
        refused(lambda: nl.notebook_launch(print, cluster=nl.SlurmCluster()), "slurm")
    if importlib.util.find_spec("deepspeed") is None:
        Path("cli_train.py").write_text(CLI_SCRIPT)
        out = run([CLI, "launch", "--use_deepspeed", "--num_processes", "2", "cli_train.py"], code=2)
        assert "'.[deepspeed]' from a notebook_launcher clone" in out and "Traceback" not in out, out
    if importlib.util.find_spec("torchao") is None:
        from notebook_launcher.runtime.precision.fp8 import fp8_backend

        refused(fp8_backend, "fp8")
    if importlib.util.find_spec("wandb") is None:
        result = nl.notebook_launch(_log_with_wandb, num_processes=1)
        assert result[0] is None


def _log_with_wandb() -> None:
    from notebook_launcher import Accelerator

    Accelerator(log_with="wandb")


def deepspeed() -> None:
    """ZeRO-2 on 2 CPU ranks. The first launch in a new venv JIT-compiles DeepSpeed's CPU comm op
    (~3 min on 2 idle cores, into the venv's own TORCH_EXTENSIONS_DIR: fresh_venv.smoke): hence 900 s."""
    from notebook_launcher import notebook_launch

    result = notebook_launch(
        _deepspeed_train,
        num_processes=2,
        distributed_type="DEEPSPEED",
        deepspeed_config={"zero_stage": 2},
        timeout=900,
    )
    assert len(result) == 2


def _deepspeed_train() -> float:
    import torch
    from torch import nn

    from notebook_launcher import Accelerator

    acc = Accelerator()
    model = nn.Linear(8, 1)
    loader = torch.utils.data.DataLoader(torch.randn(16, 8), batch_size=4)
    model, opt, loader = acc.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-2), loader)
    for x in loader:
        loss = model(x).pow(2).mean()
        acc.backward(loss)
        opt.step()
    return loss.item()


def ray() -> None:
    import ray as ray_module

    from notebook_launcher import RayCluster, notebook_launch

    # A newer Ray than the suite's writes ~/.ray/auth_token, which the suite's Ray (started with
    # authentication off) then rejects: leave the machine as it was found.
    token = Path.home() / ".ray" / "auth_token"
    token_was_there = token.exists()
    try:
        result = notebook_launch(_rank, num_processes=2, cluster=RayCluster(), timeout=300)
    finally:
        ray_module.shutdown()
        # only the Ray this function started (its own session), not every Ray on the machine
        subprocess.run([str(BIN / "ray"), "stop"], capture_output=True, timeout=120)
        if not token_was_there:
            token.unlink(missing_ok=True)
    assert sorted(result) == [0, 1], result


def slurm() -> None:
    import submitit  # noqa: F401  (the extra's package imports)

    from notebook_launcher import SlurmCluster, notebook_launch

    if shutil.which("sinfo") is None or subprocess.run(["sinfo"], capture_output=True).returncode != 0:
        print("     SLURM is not running here: submitted nothing (scripts/slurm/start.sh starts one)")
        return
    where = SlurmCluster(time=5, folder=os.path.abspath("jobs"), job_name="nl-extra-smoke")
    result = notebook_launch(_rank, num_processes=1, cluster=where, timeout=300)
    assert list(result) == [0], result


def _rank() -> int:
    return int(os.environ["RANK"])


def notebooks(repo: Path) -> None:
    import nbformat

    book = nbformat.read(repo / "notebooks" / "01_quickstart.ipynb", as_version=4)
    run_notebook(book, ".", timeout=300)
    out = "".join(
        o.get("text", "") for c in book.cells if c.cell_type == "code" for o in c.get("outputs", [])
    )
    assert "rank" in out, out[-2000:]


DISPLAY_CELL = """
import os, tempfile
from notebook_launcher import notebook_launch, release_warm_pool

def shows():
    from IPython.display import HTML, display  # the worker's first import of IPython
    import matplotlib.pyplot as plt
    display(HTML(f"<b>shown by {os.environ['RANK']}</b>"))
    plt.plot([1, 2]); plt.show()
    return 1

try:
    for method in ("forkserver", "spawn"):
        print(method, notebook_launch(shows, num_processes=2, start_method=method, timeout=120).values)
finally:
    release_warm_pool()
"""


def worker_displays_in_a_kernel() -> None:
    """A real kernel of this venv: the warm pool's and spawned workers' HTML and figures reach the cell."""
    import queue

    kernel = start_kernel(ready_timeout=120)
    kc = kernel.kc
    try:
        msg_id = kc.execute(DISPLAY_CELL)
        html, pngs, text, deadline = [], 0, "", time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                msg = kc.get_iopub_msg(timeout=1.0)
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "display_data":
                html.append(content["data"].get("text/html", ""))
                pngs += "image/png" in content["data"]
            elif kind == "stream":
                text += content["text"]
            elif kind == "error":
                text += "\n".join(content["traceback"])
            elif kind == "status" and content["execution_state"] == "idle":
                break
        import IPython

        shown = sum("<b>shown by" in h for h in html)
        if "forkserver [1, 1]" not in text or "spawn [1, 1]" not in text or shown != 4 or pngs != 4:
            raise SystemExit(f"IPython {IPython.__version__}: {shown} HTML, {pngs} PNG of 4 each:\n{text}")
        print(f"IPython {IPython.__version__}: 4 HTML and 4 PNG displays from warm-pool and spawned workers")
    finally:
        kernel.close()


def main() -> None:
    what, repo = sys.argv[1], Path(sys.argv[2]).resolve()
    os.chdir(tempfile.mkdtemp(prefix=f"nl-smoke-{what}-"))
    os.environ.pop("PYTHONPATH", None)
    step("the installed package is imported", installed_package)
    if what == "base":
        step("every public name imports", public_names)
        step("--version and metadata agree", version)
        step("README's quickstart.py on 2 processes", quickstart, repo)
        step("notebook-launcher launch on 2 processes", cli_launch)
        step("notebook_launch with FSDP, save_state/save_model/load_state", notebook_fsdp)
        step("notebook-launcher env and test", env_and_test)
        step("missing extras name themselves in one line", missing_extras)
    elif what == "display":
        step("warm-pool and spawned workers display in a real kernel", worker_displays_in_a_kernel)
    elif what == "notebooks":
        step("notebooks/01_quickstart.ipynb executes", notebooks, repo)
    else:
        step(f"the [{what}] extra", globals()[what])
    print(f"installed_smoke {what}: all passed", flush=True)


if __name__ == "__main__":
    main()
