"""Notebooks executed by a real kernel (nbclient) that launch through the ConfigPanel.

What the widgets showed is read back from the notebook's saved widget state, the way a reader of
the executed notebook gets it: progress bars, the chart, per-rank panes and status lines.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from installed import skip_module_unless_installed
from kernel_session import (
    code_cell,
    execute_notebook,
    new_notebook,
    read_notebook,
)

skip_module_unless_installed("nbformat", "nbclient")

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "notebooks" / "06_config_panel.ipynb"
STATE = "application/vnd.jupyter.widget-state+json"


def execute(nb, workdir: Path):
    """Run every cell in a fresh kernel; return (notebook, widget models by model name)."""
    took = execute_notebook(nb, workdir, 300)  # a hang is caught by the cell timeout; times: benchmarks/
    print(f"the notebook ran in {took:.0f} s")
    models: dict[str, list[dict]] = {}
    for model in nb.metadata["widgets"][STATE]["state"].values():
        models.setdefault(model["model_name"], []).append(model["state"])
    return nb, models


def facts(nb, marker: str = "FACTS ") -> dict:
    """The JSON a check cell printed after `marker`."""
    text = "".join(
        o.get("text", "") for cell in nb.cells for o in cell.get("outputs", []) if o.output_type == "stream"
    )
    found = re.findall(rf"^{marker}(.*)$", text, flags=re.M)
    assert found, f"no {marker!r} line in the outputs:\n{text[-3000:]}"
    return json.loads(found[-1])


def html_values(models: dict, marker: str) -> list[str]:
    return [m["value"] for m in models.get("HTMLModel", []) if marker in m.get("value", "")]


CHECK_RESULTS = """
import json
panel_run = panel.view  # the view of the last panel.launch / Launch click
panel.launch_button.click()  # what pressing Launch does: a background launch feeding a new RunView
button_result = panel.handle.wait(timeout=90)
button_view = panel.view
print("FACTS " + json.dumps({
    "panel_launch_steps_rank0": [r["step"] for r in panel_run.metrics if r["rank"] == 0],
    "button_steps_rank0": [r["step"] for r in button_result.metrics_for(0)],
    "button_steps_rank1": [r["step"] for r in button_result.metrics_for(1)],
    "button_values": list(button_result),
    "view_in_panel": button_view in panel.run_area.children,
    "view_metrics_equal_result": button_view.metrics == button_result.metrics,
    "last_result_steps": sorted(r["step"] for r in result.metrics_for(0)),
}))
"""


def test_example_notebook_launches_through_the_panel(tmp_path):
    nb = read_notebook(EXAMPLE)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    assert all(not cell.get("outputs") for cell in nb.cells if cell.cell_type == "code"), (
        "outputs not stripped"
    )
    nb.cells.append(code_cell(CHECK_RESULTS))
    nb, models = execute(nb, tmp_path)
    got = facts(nb)
    # result.metrics / the view hold every logged step of every rank: 3 epochs x 8 batches
    assert got["panel_launch_steps_rank0"] == list(range(24))
    assert got["button_steps_rank0"] == list(range(24)) == got["button_steps_rank1"]
    assert got["last_result_steps"] == list(range(8))  # the view=True run: 1 epoch
    assert len(got["button_values"]) == 2 and all(isinstance(v, float) for v in got["button_values"])
    assert got["view_in_panel"] and got["view_metrics_equal_result"]

    # what the widgets showed, from the saved widget state: three finished runs
    bars = [m for m in models["IntProgressModel"]]
    assert len(bars) == 3 and all(b["bar_style"] == "success" and b["value"] == b["max"] == 8 for b in bars)
    charts = html_values(models, 'class="nl-chart"')
    assert sorted(re.search(r'data-points="(\d+)"', c).group(1) for c in charts) == ["24", "24", "8"]
    assert all("<polyline" in c and "loss (rank 0)" in c for c in charts)
    labels = [m["value"] for m in models["LabelModel"] if "step" in m.get("value", "")]
    assert labels.count("epoch 2 · step 8/8") == 2 and "epoch 0 · step 8/8" in labels
    assert (
        sum("epoch 2: loss" in v for v in html_values(models, 'class="nl-output"')) >= 6
    )  # 2 runs x (2 ranks + all)
    assert len([s for s in html_values(models, "nl-status") if "done in" in s]) == 3
    tabs = models["TabModel"]
    assert all(t["titles"] == ["all ranks", "rank 0", "rank 1", "steps"] for t in tabs)


FAIL_AND_STOP = """
import json, os, time
import psutil
from notebook_launcher import ConfigPanel, LaunchStopped, WorkerError

def flaky():
    rank = int(os.environ["RANK"])
    print(f"rank {rank} starts", flush=True)
    if rank == 1:
        raise ValueError("boom on rank one")
    return rank

def sleepy():
    for i in range(1200):
        print(f"tick {i}", flush=True)
        time.sleep(0.05)

panel = ConfigPanel(config={"num_processes": 2, "distributed_type": "MULTI_CPU"}, fn=sleepy)
try:
    panel.launch(flaky)
    failed = None
except WorkerError as exc:
    failed = type(exc).__name__
failed_status = panel.view.status.value
failed_pane = panel.view.panes[1].value

panel.launch_button.click()
deadline = time.time() + 60
while panel.view.state.line_counts.get(0, 0) < 5 and time.time() < deadline:
    time.sleep(0.05)
worker_pids = [p.pid for p in psutil.Process().children() if p.is_running()]
panel.view.stop_button.click()
try:
    panel.handle.wait(timeout=30)
    stopped = None
except LaunchStopped:
    stopped = "LaunchStopped"
def live(pid):  # a worker can end between the two looks: gone, not an error
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
alive = [pid for pid in worker_pids if live(pid)]
print("FACTS " + json.dumps({
    "failed": failed, "failed_status": failed_status, "failed_pane": failed_pane,
    "stopped": stopped, "stop_status": panel.view.status.value, "workers_seen": len(worker_pids),
    "alive_after_stop": alive, "launch_enabled_again": not panel.launch_button.disabled,
}))
"""


def test_failure_and_stop_are_shown_and_stop_ends_the_workers(tmp_path):
    nb = new_notebook([code_cell(FAIL_AND_STOP)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb, _ = execute(nb, tmp_path)
    got = facts(nb)
    assert got["failed"] == "WorkerError"
    assert "failed at rank 1" in got["failed_status"] and "boom on rank one" in got["failed_status"]
    assert "rank 1 starts" in got["failed_pane"] and "ValueError" in got["failed_pane"]
    assert got["stopped"] == "LaunchStopped" and "stopped after" in got["stop_status"]
    assert got["workers_seen"] == 2 and got["alive_after_stop"] == []
    assert got["launch_enabled_again"]
