"""The ConfigPanel and RunView in a real JupyterLab 4 and a real Notebook 7, driven by headless Chromium.

A user's path: run the notebook, pick a strategy and a precision by clicking, Save, Launch, watch
the run finish (per-rank output, chart), and Stop a long run, after which no worker is left; and
what a failed run looks like in the cell. Screenshots go to test-artifacts/; with NOTEBOOK_LAUNCHER_UPDATE_DOCS=1 the panel's and the failed
run's also replace docs/panel.png and docs/failed_run.png (both shown in the docs).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest
from browser_support import ARTIFACTS, BROWSER_TEST, JUPYTERLAB_ONLY
from browser_support import jupyterlab as jl
from live_processes import is_live, live_children

pytestmark = BROWSER_TEST

ROOT = Path(__file__).resolve().parent.parent


def _refresh_doc_image(shot: Path, name: str) -> None:
    """Copy a screenshot into docs/ only when asked (NOTEBOOK_LAUNCHER_UPDATE_DOCS=1): a test run must
    not leave the checkout changed (ranks' output order varies, so every shot differs by a few pixels)."""
    if os.environ.get("NOTEBOOK_LAUNCHER_UPDATE_DOCS") == "1":
        shutil.copyfile(shot, ROOT / "docs" / name)


RUN_TIMEOUT_MS = 120_000

SETUP_CELL = """
import os, pathlib, time
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from notebook_launcher import Accelerator, ConfigPanel

pathlib.Path("kernel_pid.txt").write_text(str(os.getpid()))

def make_model():
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))

def train(epochs=2):
    torch.set_num_threads(1)
    accelerator = Accelerator()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(512, 8, generator=g)
    y = x.sum(1, keepdim=True)
    model, opt = make_model(), None
    opt = torch.optim.SGD(model.parameters(), lr=0.02)
    loader = DataLoader(TensorDataset(x, y), batch_size=32)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    step = 0
    for epoch in range(epochs):
        for xb, yb in loader:
            loss = nn.functional.mse_loss(model(xb).float(), yb)
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
            accelerator.log({"loss": loss.item()}, step=step)
            step += 1
        print(f"rank {accelerator.process_index} epoch {epoch} loss {loss.item():.4f} with {accelerator.mixed_precision}")
    return loss.item()

panel = ConfigPanel(model=make_model(), fn=train, save_path="browser_config.yaml")
panel
"""

SLEEPY = """
def sleepy():
    for i in range(2400):
        print(f"tick {i}", flush=True)
        time.sleep(0.05)
"""

LONG_CELL = (
    SLEEPY
    + """
long_panel = ConfigPanel(config={"num_processes": 2, "distributed_type": "MULTI_CPU"}, fn=sleepy)
long_panel
"""
)

LIGHT_SETUP = """
import os, pathlib, time
pathlib.Path("kernel_pid.txt").write_text(str(os.getpid()))
"""


FAILING_SETUP = """
import torch
from torch import nn
from notebook_launcher import notebook_launch, Accelerator

def train():
    accelerator = Accelerator()
    torch.manual_seed(0)  # the same numbers every run: docs/failed_run.png only changes with the code
    model = accelerator.prepare(nn.Linear(8, 1))
    for step in range(3):
        x = torch.randn(4, 8)
        if accelerator.process_index == 1 and step == 2:
            x = x[:, :7]  # a bad batch on rank 1
        loss = model(x).pow(2).mean()
        accelerator.backward(loss)
        print(f"step {step}: loss {loss.item():.3f}")
"""

FAILING_CELL = "notebook_launch(train, num_processes=2)"

PIPELINE_CELL = """
from collections import OrderedDict
import torch
from torch import nn
from notebook_launcher import Accelerator, ParallelismConfig, notebook_launch
from notebook_launcher.utils import TorchPipelineParallelConfig

def train():
    pipeline = TorchPipelineParallelConfig("1f1b", n_microbatches=4, loss_fn=nn.functional.mse_loss)
    accelerator = Accelerator(parallelism_config=ParallelismConfig(pp_size=2, pp_handler=pipeline))
    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.Linear(64, 256), nn.Tanh(), nn.Linear(256, 64)) for _ in range(4)]
    model = nn.Sequential(OrderedDict(layers=nn.Sequential(*blocks)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    model, opt = accelerator.prepare(model, opt)
    x, y = torch.randn(64, 64), torch.randn(64, 64)
    for step in range(20):
        loss = model.step(x, target=y)
        opt.step()
        opt.zero_grad()
    return loss.item()

notebook_launch(train, num_processes=2, view=True)
"""

BLOCKING_CELL = """
from notebook_launcher import notebook_launch
notebook_launch(sleepy, num_processes=2, view=True)  # blocks: Stop must still reach the kernel
"""


@pytest.fixture(scope="module")
def scratch():
    yield from jl.scratch_dir("nl-browser-")


@pytest.fixture(scope="module")
def notebook_dir(scratch):
    notebooks = {
        "panel.ipynb": [SETUP_CELL, LONG_CELL],
        "blocking.ipynb": [LIGHT_SETUP + SLEEPY, BLOCKING_CELL],
        "failing.ipynb": [FAILING_SETUP, FAILING_CELL],
        "pipeline.ipynb": [LIGHT_SETUP, PIPELINE_CELL],
    }
    return jl.lab_root(scratch, {name: [code.strip() for code in cells] for name, cells in notebooks.items()})


@pytest.fixture
def browser(playwright, scratch, request):
    """A fresh Chromium per test: closing it ends every renderer process it started."""
    context = jl.launch_browser(playwright, str(scratch / f"chromium-{request.node.name}"))
    yield context
    context.close()


@pytest.fixture
def tab(browser, lab, request):
    """A fresh page; its screenshot is kept, its kernels are shut down after the test."""
    page = browser.new_page()
    page.set_default_timeout(60_000)
    jl.keep_console(page)
    yield page
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{request.node.name}-page.png"))
    page.close()
    lab.delete_sessions()


@pytest.fixture
def page(tab, lab):
    """The panel notebook, run: both panels rendered as widgets."""
    jl.open_notebook(tab, lab, "panel.ipynb")
    assert jl.run_all_cells(tab) is True, jl.error_outputs(tab)
    assert jl.error_outputs(tab) == []
    jl.wait_visible(tab, lab, ".nl-config-panel", nth=1)  # fails with the page's and server's state
    assert jl.widget_problems(tab) == []
    return tab


def worker_processes(psutil, notebook_dir: Path) -> list:
    kernel = psutil.Process(int((notebook_dir / "kernel_pid.txt").read_text()))
    return live_children(kernel)


def wait_gone(psutil, workers: list, seconds: float = 15) -> None:
    deadline = time.monotonic() + seconds
    while any(is_live(p) for p in workers):
        assert time.monotonic() < deadline, f"workers still running after Stop: {workers}"
        time.sleep(0.1)


def choice(panel, text: str):
    return panel.locator("button.nl-choice").filter(has_text=re.compile(rf"^\s*{re.escape(text)}\s*$"))


def test_pick_settings_save_launch_and_watch_the_run(page, lab, notebook_dir):
    panel = page.locator(".nl-config-panel").nth(0)
    assert "CPU core(s)" in panel.locator(".nl-hardware").inner_text()
    fp8 = choice(panel, "fp8")
    assert fp8.is_disabled() and "8.9" in fp8.get_attribute("title")

    processes = panel.locator(".nl-field-num-processes input")
    processes.fill("2")
    processes.press("Tab")
    panel.locator(".nl-summary", has_text="2 process(es)").wait_for()

    # FSDP shows its section; the layer classes come from the model given to the panel
    fsdp_section = panel.locator(".nl-fsdp-section")
    assert not fsdp_section.is_visible()
    choice(panel, "FSDP").click()
    fsdp_section.wait_for(state="visible")
    panel.locator(".nl-field-fsdp-config-fsdp-auto-wrap-policy select").select_option(
        "TRANSFORMER_BASED_WRAP"
    )
    # The summary is the last thing the kernel rewrites after a change: wait for it, not a field.
    panel.locator(".nl-summary", has_text="1 setting(s) to fix").wait_for()
    layer_field = panel.locator(".nl-field-fsdp-config-fsdp-transformer-layer-cls-to-wrap")
    assert "needs fsdp_transformer_layer_cls_to_wrap" in layer_field.locator(".nl-error").inner_text()
    layer_field.locator("select").select_option(label="Linear ×2")
    panel.locator(".nl-summary", has_text="→ FSDP · no · 2 process(es)").wait_for()
    assert panel.locator(".nl-error").count() == 0
    ARTIFACTS.mkdir(exist_ok=True)
    panel.screenshot(path=str(ARTIFACTS / f"panel-{lab.app}.png"))
    if lab.app == "lab":
        _refresh_doc_image(ARTIFACTS / "panel-lab.png", "panel.png")

    # DDP with bf16 on 2 processes; wait for the kernel's reading of the form before clicking on
    choice(panel, "DDP").click()
    fsdp_section.wait_for(state="hidden")
    choice(panel, "bf16").click()
    panel.locator(".nl-summary", has_text="→ DDP (CPU) · bf16 · 2 process(es)").wait_for()

    panel.locator("button", has_text="Save").click()
    panel.locator(".nl-message", has_text="Saved to").wait_for()
    from notebook_launcher.config import load_config

    saved = load_config(notebook_dir / "browser_config.yaml")
    assert (saved.distributed_type, saved.mixed_precision, saved.num_processes) == ("MULTI_CPU", "bf16", 2)

    panel.locator("button", has_text="Launch").click()
    view = panel.locator(".nl-run-view")
    view.locator(".nl-status", has_text="done in").wait_for(timeout=RUN_TIMEOUT_MS)
    view.locator(".lm-TabBar-tab", has_text="rank 1").click()
    rank1 = view.locator(".nl-pane-rank-1")
    rank1.wait_for(state="visible")
    assert "rank 1 epoch 1" in rank1.inner_text() and "with bf16" in rank1.inner_text()
    assert "rank 0 epoch" not in rank1.inner_text()
    chart = view.locator("svg.nl-chart")
    assert chart.is_visible() and chart.get_attribute("data-points") == "16"  # 2 epochs x 8 batches
    assert view.locator("svg.nl-chart polyline").is_visible()
    assert "epoch 1 · step 8/8" in view.inner_text()
    view.screenshot(path=str(ARTIFACTS / f"finished_run-{lab.app}.png"))
    view.locator(".lm-TabBar-tab", has_text="steps").click()  # where each rank's steps went
    steps = view.locator(".nl-pane-steps")
    steps.wait_for(state="visible")
    assert steps.locator(".nl-steps-rank").count() == 2 and "ms/step" in steps.inner_text()


@JUPYTERLAB_ONLY
def test_the_pipeline_tab_draws_each_stage_s_measured_schedule(tab, lab):
    """Issue 35: a pipeline run's view gets a "pipeline" tab: one lane per stage, a block per
    micro-batch's forward and backward as measured, the bubble beside the ideal."""
    jl.open_notebook(tab, lab, "pipeline.ipynb")
    assert jl.run_all_cells(tab) is True, jl.error_outputs(tab)
    view = tab.locator(".nl-run-view")
    view.locator(".nl-status", has_text="done in").wait_for(timeout=RUN_TIMEOUT_MS)
    view.locator(".lm-TabBar-tab", has_text="pipeline").click()
    pane = view.locator(".nl-pane-pipeline")
    pane.wait_for(state="visible")
    assert pane.locator(".nl-pipeline-lane").count() == 2
    assert pane.locator(".nl-pipeline-F").count() == 8 and pane.locator(".nl-pipeline-B").count() == 8
    assert "(ideal 0.200)" in pane.inner_text() and "rank 1 · stage(s) [1]" in pane.inner_text()
    box = pane.locator(".nl-pipeline-F").first.bounding_box()
    assert box is not None and box["width"] > 0 and box["height"] > 0  # drawn, not only in the DOM
    ARTIFACTS.mkdir(exist_ok=True)
    view.screenshot(path=str(ARTIFACTS / "pipeline_tab.png"))


def _stop_when_ticking(view, psutil, notebook_dir) -> None:
    """Wait for the run's 20th tick, press Stop, and see every worker gone."""
    view.locator(".nl-pane-all", has_text="tick 20").wait_for(timeout=RUN_TIMEOUT_MS)
    workers = worker_processes(psutil, notebook_dir)
    assert len(workers) >= 2, workers
    view.locator("button", has_text="Stop").click()
    view.locator(".nl-status", has_text="stopped after").wait_for(timeout=30_000)
    wait_gone(psutil, workers)


@JUPYTERLAB_ONLY
def test_stop_ends_every_worker(page, lab, notebook_dir):
    psutil = pytest.importorskip("psutil")
    long_panel = page.locator(".nl-config-panel").nth(1)
    long_panel.locator(".nl-summary", has_text="→ DDP (CPU)").wait_for()
    long_panel.locator("button", has_text="Launch").click()
    view = long_panel.locator(".nl-run-view")
    _stop_when_ticking(view, psutil, notebook_dir)
    # the pane stays scrolled to the newest line (it holds more lines than fit)
    scroll = page.evaluate(
        "() => { const d = document.querySelector('.nl-pane-all .nl-output');"
        " return [d.scrollHeight > d.clientHeight, d.scrollTop]; }"
    )
    assert scroll == [True, 0], scroll  # column-reverse: scrollTop 0 is the bottom
    text = view.locator(".nl-pane-all").inner_text()
    last_tick = max(int(n) for n in re.findall(r"tick (\d+)", text))
    time.sleep(1.0)  # nothing more arrives once the workers are gone
    assert (
        max(int(n) for n in re.findall(r"tick (\d+)", view.locator(".nl-pane-all").inner_text())) == last_tick
    )
    view.screenshot(path=str(ARTIFACTS / f"stopped_run-{lab.app}.png"))


@JUPYTERLAB_ONLY
def test_stop_reaches_a_blocking_launch(tab, lab, notebook_dir):
    """notebook_launch(..., view=True) blocks the cell; the Stop click is still handled at once."""
    psutil = pytest.importorskip("psutil")
    jl.open_notebook(tab, lab, "blocking.ipynb")
    tab.evaluate("() => { window.__runAll = window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    view = tab.locator(".nl-run-view")
    _stop_when_ticking(view, psutil, notebook_dir)
    assert tab.evaluate("() => window.__runAll") is False  # the cell raised LaunchStopped
    assert [e["ename"] for e in jl.error_outputs(tab)] == ["LaunchStopped"]
    jl.wait_kernel_idle(tab)


@JUPYTERLAB_ONLY
def test_a_failed_run_shows_one_line_and_the_workers_traceback(tab, lab):
    jl.open_notebook(tab, lab, "failing.ipynb")
    assert jl.run_all_cells(tab) is False  # the launch cell raised
    assert [e["ename"] for e in jl.error_outputs(tab)] == ["WorkerError"]
    cell = tab.locator(f"{jl.NOTEBOOK} .jp-Cell").nth(1)
    error = cell.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").last
    lines = error.inner_text().splitlines()
    assert lines[0].startswith(
        "WorkerError: rank 1 raised RuntimeError: mat1 and mat2 shapes cannot be multiplied"
    )
    assert "--- traceback of rank 1 ---" in lines
    assert any(re.fullmatch(r"\s*Cell In\[\d+\], line 13, in train\(.*\)", line) for line in lines), lines
    assert any(re.fullmatch(r"\s*… \d+ frames? in torch …", line) for line in lines), lines  # issue 20
    shown = "\n".join(lines)
    assert "supervisor.py" not in shown and "launch/notebook.py" not in shown
    assert "[rank1] step 1: loss" in cell.inner_text()  # the ranks' output stays above the error
    jl.wait_kernel_idle(tab)
    ARTIFACTS.mkdir(exist_ok=True)
    cell.screenshot(path=str(ARTIFACTS / f"failed_run-{lab.app}.png"))
    if lab.app == "lab":
        _refresh_doc_image(ARTIFACTS / "failed_run-lab.png", "failed_run.png")
