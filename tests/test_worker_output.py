"""Worker output outside a kernel (issue 20): "\\r" lines live, a bounded share in the cell with
every line kept (result.logs, a private log file per rank), displays and tqdm relayed from a
spawned worker (no kernel shell to lean on)."""

from __future__ import annotations

import os
import stat
import time

import pytest

from notebook_launcher import notebook_launch
from notebook_launcher.launch.events import BarUpdate, OutputLine, WorkerDisplay


def test_a_flood_shows_a_bounded_share_and_keeps_every_line_in_private_files(capfd):
    def flood():
        rank = int(os.environ["RANK"])
        for i in range(900):
            print(f"r{rank} line {i}")
        return rank

    result = notebook_launch(flood, num_processes=2, start_method="fork")
    out = capfd.readouterr()
    text = out.out + out.err
    assert "[rank1] r1 line 199" in text and "[rank1] r1 line 500" not in text
    assert "… 680 more lines of rank 1 not shown here" in text and "[rank1] r1 line 899" in text
    path = text.split("result.logs[1] and ", 1)[1].split(";", 1)[0]
    assert open(path).read() == result.logs[1] == "".join(f"r1 line {i}\n" for i in range(900))
    root = os.path.dirname(os.path.dirname(path))
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o700 and os.stat(root).st_uid == os.getuid()


def test_a_carriage_return_line_is_shown_live_before_its_newline():
    def rewrites():
        for step in range(3):
            print(f"step {step}", end="\r", flush=True)
            time.sleep(0.4)
        print("done")

    seen = []
    notebook_launch(rewrites, num_processes=1, observers=[seen.append], quiet=True)
    lines = [(e.text, e.live, time.monotonic()) for e in seen if isinstance(e, OutputLine)]
    live = [text for text, is_live, _ in lines if is_live]
    assert "step 0" in live and "step 1" in live, lines
    assert [text for text, is_live, _ in lines if not is_live] == ["done"]


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_a_spawned_or_warm_pool_worker_relays_display_and_tqdm(start_method):
    def shows():
        from IPython.display import HTML, display
        from tqdm.auto import tqdm

        for _ in tqdm(range(5), desc="load"):
            pass
        display(HTML("<b>spawned</b>"))
        return 1

    seen = []
    notebook_launch(shows, num_processes=1, start_method=start_method, observers=[seen.append], quiet=True)
    bars = [e for e in seen if isinstance(e, BarUpdate)]
    displays = [e for e in seen if isinstance(e, WorkerDisplay)]
    assert bars and bars[-1].closed and bars[-1].n == 5 and bars[-1].desc == "load", bars
    assert [d.data.get("text/html") for d in displays] == ["<b>spawned</b>"]
    printed = [e.text for e in seen if isinstance(e, OutputLine)]
    assert not any("load" in line or "%" in line for line in printed), printed  # no text bar as well


def test_the_run_view_shows_the_ranks_bars_and_keeps_live_lines_out_of_its_panes():
    from notebook_launcher.widgets import RunView

    view = RunView()
    view(OutputLine(0, "stdout", "step 3", live=True))
    view(BarUpdate(0, 1, "epoch", 4, 10, "4/10 [00:01<00:02, 3.9it/s]", "epoch: 40%|####| 4/10"))
    view(
        BarUpdate(
            1, 7, "epoch", 10, 10, "10/10 [00:02<00:00, 4.1it/s]", "epoch: 100%|#####| 10/10", closed=True
        )
    )
    view.refresh()
    assert 'value="4" max="10"' in view.bars.value and "10/10 [00:02" in view.bars.value
    assert "[rank1]" in view.bars.value and view.bars.layout.display == ""
    assert view.state.total_lines == 0


def test_slurm_nodes_relay_displays_and_bars_through_their_events_file(tmp_path):
    """A SLURM node writes the ranks' displays and bars to its events file; the notebook reads them back."""
    import json

    from notebook_launcher.clusters.logs import EVENT_KIND, LogFollower, encode_event

    display = WorkerDisplay(3, {"text/html": "<b>node 1</b>"}, {"k": 1}, "abc", False)
    bar = BarUpdate(3, 9, "epoch", 2, 4, "2/4 [00:01<00:01]", "epoch: 50%|##| 2/4", closed=False)
    events = tmp_path / "events.jsonl"
    with open(events, "w") as handle:  # as the SLURM task writes them (clusters/slurm_task.py _emit)
        for event in (display, bar):
            handle.write(json.dumps({"kind": EVENT_KIND, "payload": encode_event(event), "time": 0.0}) + "\n")
    follower = LogFollower(1, tmp_path / "out", tmp_path / "err", events)
    assert follower.read() == ([display, bar], [])


PLAIN_SCRIPT = """
import sys
from notebook_launcher import notebook_launch
from notebook_launcher.launch.events import WorkerDisplay

def shows():
    from IPython.display import HTML, display  # the first import of IPython in this process tree
    display(HTML("<b>from a script</b>"))
    return "IPython" in sys.modules

if __name__ == "__main__":  # spawn imports this file again in each worker
    seen = []
    result = notebook_launch(shows, num_processes=2, start_method=sys.argv[1], observers=[seen.append], quiet=True)
    assert "IPython" not in sys.modules, "the launcher itself imported IPython"
    print(result.values, sorted(e.data.get("text/html") for e in seen if isinstance(e, WorkerDisplay)))
"""


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_a_plain_script_whose_worker_imports_ipython_first_relays_its_display(tmp_path, start_method):
    """No kernel and no IPython in the launcher: the worker's own first import of IPython (which on
    IPython 9 loads its display functions while its shell module is half loaded) still displays."""
    import subprocess
    import sys

    script = tmp_path / "plain.py"
    script.write_text(PLAIN_SCRIPT)
    run = subprocess.run(
        [sys.executable, str(script), start_method], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "[True, True] ['<b>from a script</b>', '<b>from a script</b>']" in run.stdout, (
        run.stdout + run.stderr
    )
