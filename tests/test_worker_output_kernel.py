"""Workers as notebook citizens in a real Jupyter kernel (issue 20): tqdm bars, display(), figures,
DataFrames, display_id updates and floods of lines reach the cell from fork workers and %%ranks
ranks; nothing a rank does reaches the kernel's sockets ("attempted to send message from fork")."""

from __future__ import annotations

import queue
import time

import pytest
from kernel_isolation import start_kernel

pytestmark = pytest.mark.slow

FORK_MESSAGE = "send message from fork"

RICH = """
import os, time
from notebook_launcher import notebook_launch

def rich(lines):
    from tqdm.auto import tqdm
    rank = int(os.environ["RANK"])
    for _ in tqdm(range(30 + rank), desc="epoch"):
        time.sleep(0.005)
    print("step 1", end="\\r"); print("step 2", end="\\r"); print()
    if rank == 0:
        from IPython.display import HTML, display
        import matplotlib.pyplot as plt
        import pandas as pd
        display(HTML("<b>from rank zero</b>"))
        plt.plot([1, 2, 3]); plt.show()
        display(pd.DataFrame({"loss": [0.5, 0.25]}))
        handle = display(HTML("first"), display_id=True)
        handle.update(HTML("second"))
    if rank == 1:  # straight to the kernel's own connection, as ipykernel's objects would
        from IPython import get_ipython
        kernel = get_ipython().kernel
        kernel.session.send(kernel.iopub_socket, "stream", {"name": "stdout", "text": "sneaked"})
    try:
        import ipywidgets
        ipywidgets.IntSlider()
    except Exception as exc:
        print("widget refused:", type(exc).__name__)
    for i in range(lines):
        print(f"flood {i}")
    return rank

result = notebook_launch(rich, args=(1500,), num_processes=2, start_method="fork")
"""


class Kernel:
    """A kernel whose stderr is kept, and every iopub message of each cell."""

    def __init__(self, cwd, stderr_path) -> None:
        self.stderr_path = stderr_path
        self._stderr = open(stderr_path, "w")  # noqa: SIM115
        self.kernel = start_kernel(str(cwd), stderr=self._stderr)
        self.km, self.kc = self.kernel.km, self.kernel.kc

    def run(self, code: str, timeout: float = 180) -> list[dict]:
        msg_id = self.kc.execute(code)
        deadline, messages = time.monotonic() + timeout, []
        while time.monotonic() < deadline:
            try:
                msg = self.kc.get_iopub_msg(timeout=1.0)
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            messages.append(msg)
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                return messages
        raise TimeoutError(f"cell did not finish in {timeout} s: {code[:80]}")

    def close(self) -> None:
        self.kernel.close()
        self._stderr.close()


def outputs(messages: list[dict]) -> list[dict]:
    """The cell's outputs as the notebook ends up holding them (display ids updated in place)."""
    outs: list[dict] = []
    by_id: dict[str, list[dict]] = {}
    for msg in messages:
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            outs.append({"type": "stream", "name": content["name"], "text": content["text"]})
        elif kind in ("display_data", "execute_result"):
            out = {"type": kind, "data": content["data"], "metadata": content.get("metadata", {})}
            outs.append(out)
            by_id.setdefault(content.get("transient", {}).get("display_id"), []).append(out)
        elif kind == "update_display_data":
            for out in by_id.get(content["transient"]["display_id"], []):
                out["data"] = content["data"]
        elif kind == "clear_output":
            outs.clear()
        elif kind == "error":
            outs.append({"type": "error", "text": "\n".join(content["traceback"])})
    return outs


def text_of(outs: list[dict]) -> str:
    return "".join(o.get("text", "") or o.get("data", {}).get("text/plain", "") + "\n" for o in outs)


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("citizens")
    kernel = Kernel(cwd, cwd / "kernel-stderr.txt")
    yield kernel
    kernel.close()


def test_fork_workers_show_bars_displays_and_a_bounded_flood(session):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (it belongs in the test extra)")
    pytest.importorskip("pandas", reason="pandas is not installed (it belongs in the test extra)")
    messages = session.run(RICH)
    outs = outputs(messages)
    text = text_of(outs)
    assert not [o for o in outs if o["type"] == "error"], text
    html = [o["data"]["text/html"] for o in outs if "text/html" in o.get("data", {})]
    bars = next(o["data"] for o in outs if "notebook-launcher-bars" in o.get("data", {}).get("text/html", ""))
    assert "[rank0] epoch: 100%" in bars["text/plain"] and "30/30" in bars["text/plain"], bars
    assert "[rank1] epoch: 100%" in bars["text/plain"] and "31/31" in bars["text/plain"], bars
    assert any("<b>from rank zero</b>" in h for h in html)
    assert any("image/png" in o.get("data", {}) for o in outs), "the matplotlib figure"
    assert any("<table" in h and "loss" in h and "dataframe" in h for h in html), "the DataFrame"
    assert any(h.endswith("second") for h in html) and not any(h.endswith("first") for h in html)
    ranks = {
        o["metadata"]["notebook_launcher"]["rank"]
        for o in outs
        if "notebook_launcher" in o.get("metadata", {})
    }
    assert ranks == {0}
    assert "[rank0] widget refused: WorkerWidgetError" in text and "[rank1] step 2" in text
    assert "sneaked" not in text
    # A flood of 2 x 1,500 lines: a bounded share in the cell, in a handful of messages, all kept.
    streams = [m for m in messages if m["msg_type"] == "stream"]
    assert len(streams) < 40, len(streams)
    assert "[rank1] flood 150" in text and "[rank1] flood 1000" not in text
    assert "[rank1] flood 1499" in text and "more lines of rank 1 not shown here" in text
    assert FORK_MESSAGE not in text
    check = text_of(
        outputs(session.run("print(result.values, result.logs[1].count('flood'), result.logs[1])"))
    )
    assert "[0, 1] 1500" in check
    assert "'stream' message from this rank to the kernel was dropped" in check  # beyond the cell's share


def test_ranks_cells_show_bars_and_displays(session):
    session.run("%load_ext notebook_launcher\n%ranks start 2")
    cell = (
        "%%ranks\nfrom tqdm.auto import tqdm\nfrom IPython.display import HTML, display\n"
        "for _ in tqdm(range(12)): pass\ndisplay(HTML('<i>rank cell</i>'))\nprint('after')"
    )
    outs = outputs(session.run(cell))
    session.run("%ranks stop")
    text = text_of(outs)
    bars = next(
        o["data"]["text/plain"]
        for o in outs
        if "notebook-launcher-bars" in o.get("data", {}).get("text/html", "")
    )
    assert "[rank0] 100%" in bars and "[rank1] 100%" in bars and "12/12" in bars, bars
    shown = [o for o in outs if "<i>rank cell</i>" in o.get("data", {}).get("text/html", "")]
    assert {o["metadata"]["notebook_launcher"]["rank"] for o in shown} == {0, 1}
    second = shown[1]["metadata"]["notebook_launcher"]["rank"]  # once two ranks display, each is labelled
    assert f"[rank{second}]" in shown[1]["data"]["text/html"] and "[rank" not in shown[0]["data"]["text/html"]
    assert "[rank0] after" in text and FORK_MESSAGE not in text


def test_with_a_run_view_the_ranks_displays_still_reach_the_cell(session):
    cell = (
        "from notebook_launcher import notebook_launch\n"
        "def shows():\n    from IPython.display import HTML, display\n    print('a line for the view')\n"
        "    display(HTML('<i>beside the view</i>'))\n"
        "notebook_launch(shows, num_processes=1, start_method='fork', view=True)"
    )
    outs = outputs(session.run(cell))
    datas = [o["data"] for o in outs if o["type"] == "display_data"]
    assert any("application/vnd.jupyter.widget-view+json" in d for d in datas)  # the RunView
    assert any(d.get("text/html") == "<i>beside the view</i>" for d in datas)
    assert "a line for the view" not in text_of(outs)  # lines go to the view's panes


TRAINER = """
from notebook_launcher import notebook_launch
import transformers  # once in the kernel: the forked rank shares it instead of importing it again

def train():
    import tempfile, torch
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments
    config = BertConfig(vocab_size=32, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=16, max_position_embeddings=16)
    data = [{"input_ids": torch.tensor([1, 2, 3, 4]), "labels": torch.tensor(i % 2)} for i in range(8)]
    args = TrainingArguments(output_dir=tempfile.mkdtemp(), max_steps=4, per_device_train_batch_size=2,
                             report_to=[], save_strategy="no", use_cpu=True)
    return Trainer(model=BertForSequenceClassification(config), args=args, train_dataset=data).train().global_step

trained = notebook_launch(train, num_processes=1, start_method="fork")
"""


def test_a_trainer_in_a_rank_shows_its_default_progress(session):
    """transformers' Trainer in a notebook picks its notebook progress (display + display_id updates)."""
    pytest.importorskip("transformers")
    outs = outputs(session.run(TRAINER, timeout=300))
    html = [o["data"].get("text/html", "") for o in outs if o["type"] == "display_data"]
    assert any("<progress value='4' max='4'" in h and "[4/4" in h for h in html), text_of(outs)[-3000:]
    assert FORK_MESSAGE not in text_of(outs)


def test_the_kernel_never_saw_a_rank_use_its_sockets(session):
    """Last in this module: what every cell above left in the kernel's own stderr."""
    assert text_of(outputs(session.run("print(1 + 1)"))).strip() == "2"
    assert FORK_MESSAGE not in session.stderr_path.read_text()


SHOWS_FIRST_IMPORT = """
import os, tempfile, time
from notebook_launcher import notebook_launch, release_warm_pool

def shows(cleared):
    # The first import of IPython in this process (spawn, the warm pool): IPython 9 imports its
    # display functions while its shell module is half loaded (issue 37).
    from IPython.display import HTML, clear_output, display, update_display
    import matplotlib.pyplot as plt
    from tqdm.auto import tqdm
    for _ in tqdm(range(7), desc="fresh"):
        pass
    rank = int(os.environ["RANK"])
    if rank == 0:  # clear_output clears the cell, whichever rank asks: rank 1 shows after it
        display(HTML("<b>gone</b>"))
        clear_output()
        open(cleared, "w").close()
    while not os.path.exists(cleared):
        time.sleep(0.01)
    display(HTML(f"<b>hi {{rank}}</b>"))
    display(HTML(f"old {{rank}}"), display_id=f"slot{{rank}}")
    update_display(HTML(f"new {{rank}}"), display_id=f"slot{{rank}}")
    plt.plot([1, 2]); plt.show()
    return 1

try:
    shown = notebook_launch(shows, args=(tempfile.mktemp(),), num_processes=2, start_method={method!r}, timeout=120)
finally:
    release_warm_pool()
print("values", shown.values)
"""


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_a_worker_that_imports_ipython_first_displays_in_the_cell(session, method):
    """The warm pool (forkserver) and spawn start workers without IPython loaded: display(), a
    display_id update, clear_output, a matplotlib figure and tqdm.auto all reach the cell."""
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (it belongs in the test extra)")
    outs = outputs(session.run(SHOWS_FIRST_IMPORT.format(method=method), timeout=240))
    text = text_of(outs)
    assert not [o for o in outs if o["type"] == "error"], text
    assert "values [1, 1]" in text, text
    html = [o["data"].get("text/html", "") for o in outs if o["type"] == "display_data"]
    assert any("<b>hi 0</b>" in h for h in html) and any("<b>hi 1</b>" in h for h in html), html
    assert not any("<b>gone</b>" in h for h in html), html  # cleared before anything else was shown
    assert any(h.endswith("new 0") for h in html) and any(h.endswith("new 1") for h in html), html
    assert not any("old" in h for h in html), html
    assert sum("image/png" in o.get("data", {}) for o in outs) == 2, "each rank's figure"
    bars = next(o["data"] for o in outs if "notebook-launcher-bars" in o.get("data", {}).get("text/html", ""))
    assert "7/7" in bars["text/plain"], bars
