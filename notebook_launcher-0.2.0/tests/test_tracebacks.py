"""Worker tracebacks that read like IPython's (issue 20): the user's frames with their source,
library frames folded into one line, the full text one attribute away, colour only where it is
rendered. The real-kernel checks (colour, cells, DDP) are in test_launch_kernel_errors.py and
test_interactive_kernel.py; here: a plain script's process, and the parts that need no process."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import types

import torch
import torch.nn as nn

from notebook_launcher.launch.cell import colour
from notebook_launcher.launch.cell.traceback_view import fill_source, render_chain
from notebook_launcher.launch.events import RunFinished, RunStarted
from notebook_launcher.launch.result import RankFailure, WorkerError
from notebook_launcher.launch.worker.frames import capture
from notebook_launcher.widgets import RunView

ANSI = re.compile(r"\x1b\[[0-9;]*m")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Broken(nn.Module):
    def forward(self, x):
        raise ValueError(f"bad forward on {x.shape[0]} rows")


def through_torch():
    return nn.Sequential(Broken())(torch.ones(3, 2))


def _caught(fn) -> BaseException:
    try:
        fn()
    except BaseException as exc:  # noqa: BLE001
        return exc.with_traceback(exc.__traceback__.tb_next)  # from fn on, as a worker sends it
    raise AssertionError("did not raise")


def test_library_frames_fold_into_one_line_and_the_users_keep_their_source():
    text = render_chain(capture(_caught(through_torch)), on=False)
    lines = text.splitlines()
    assert lines[0].startswith("ValueError ") and lines[0].endswith("Traceback (most recent call last)")
    assert re.fullmatch(r"File .*test_tracebacks\.py:\d+, in through_torch\(\)", lines[1]), text
    assert re.search(r"\n-+> \d+     return nn\.Sequential\(Broken\(\)\)\(torch\.ones\(3, 2\)\)\n", text), (
        text
    )
    # Sequential's call, its forward and Broken's call: five torch frames, one line.
    assert "    … 5 frames in torch …" in lines, text
    assert re.search(r"in Broken\.forward\(self, x\)\n(.*\n)*?-+> \d+ +raise ValueError", text), text
    assert lines[-2:] == ["", "ValueError: bad forward on 3 rows"]
    assert "module.py" not in text and not ANSI.search(text)


def test_the_raising_library_frame_stays_and_nothing_folds_without_user_frames():
    def bad_call():
        return torch.nn.functional.linear(torch.ones(2, 3), torch.ones(4, 5))

    def through_a_library():
        return nn.Sequential(nn.Linear(3, 4))(torch.ones(2, 5))

    assert "frames in" not in render_chain(capture(_caught(bad_call)), on=False)
    text = render_chain(capture(_caught(through_a_library)), on=False)
    assert "… 5 frames in torch …" in text and "linear.py" in text  # Linear.forward raised: shown
    chain = capture(_caught(through_a_library))
    for frame in chain[0]["frames"]:
        frame["library"] = "torch"  # no frame of the user's at all: everything is shown
    assert "frames in" not in render_chain(chain, on=False)


def test_a_chain_shows_each_exception_with_ipythons_links_and_colours():
    def wrapped():
        try:
            through_torch()
        except ValueError as exc:
            raise RuntimeError("could not train") from exc

    text = render_chain(capture(_caught(wrapped)), on=True)
    assert "\x1b[0;31mValueError\x1b[0m: bad forward" in text  # IPython's colour for the name
    assert "\x1b[0;31mRuntimeError\x1b[0m: could not train" in text
    plain = ANSI.sub("", text)
    assert plain.index("ValueError: bad") < plain.index("direct cause") < plain.index("RuntimeError: could")


def test_a_recursion_shows_the_repeated_frame_three_times_then_a_count():
    def deep(n):
        return deep(n + 1)

    text = render_chain(capture(_caught(lambda: deep(0))), on=False)
    assert text.count(".deep(n)\n") == 3, text
    assert re.search(r"\n    \[… the frame above \d+ more times\]\n", text), text


def test_a_plain_script_gets_no_colour_and_the_full_text_in_str(tmp_path):
    script = tmp_path / "train_script.py"
    script.write_text(
        textwrap.dedent(
            """
            import torch, torch.nn as nn
            from notebook_launcher import WorkerError, notebook_launch

            class Broken(nn.Module):
                def forward(self, x):
                    raise ValueError("bad forward")

            def train():
                return nn.Sequential(Broken())(torch.ones(1))

            if __name__ == "__main__":
                try:
                    notebook_launch(train, num_processes=1)
                except WorkerError as err:
                    print("\\n".join(err._render_traceback_()))
                    print("=== str ===")
                    print(err)
            """
        )
    )
    env = {**os.environ, "PYTHONPATH": ROOT}
    env.pop("NO_COLOR", None)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    shown, _, plain = done.stdout.partition("=== str ===")
    assert plain, done.stdout + done.stderr
    assert "\x1b[" not in done.stdout + done.stderr  # a pipe: no escape codes anywhere
    assert "… 5 frames in torch …" in shown and 'raise ValueError("bad forward")' in shown
    assert "every frame: err.full_traceback" in shown  # where the folded frames are
    assert "torch/nn/modules/container.py" not in shown
    assert "torch/nn/modules/container.py" in plain  # str(err): every frame, as Python prints them


def test_colour_follows_the_kernel_the_terminal_and_no_color(monkeypatch):
    class Shell:
        kernel = object()
        colors = "Neutral"

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert colour.wanted() is False  # pytest's stderr is not a terminal, and no kernel
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=Shell))
    assert colour.wanted() is True
    monkeypatch.setattr(Shell, "colors", "NoColor")  # %colors nocolor
    assert colour.wanted() is False
    monkeypatch.setattr(Shell, "colors", "Neutral")
    monkeypatch.setenv("NO_COLOR", "1")
    assert colour.wanted() is False


def test_a_spawned_workers_missing_cell_source_comes_from_this_process(tmp_path):
    import linecache

    name = str(tmp_path / "cell.py")
    linecache.cache[name] = (20, None, ["def f():\n", "    return 1 / 0\n"], name)
    text = f'Traceback (most recent call last):\n  File "{name}", line 2, in f\nZeroDivisionError: 1 / 0'
    assert fill_source(text).splitlines()[2] == "    return 1 / 0"
    assert fill_source(fill_source(text)) == fill_source(text)
    frame = {
        "file": name,
        "line": 2,
        "name": "f",
        "args": "()",
        "library": None,
        "first_line": 1,
        "source": [],
    }
    chain = [
        {"type": "ZeroDivisionError", "exception": ["ZeroDivisionError: division by zero"], "frames": [frame]}
    ]
    assert render_chain(chain, on=False).splitlines()[2:4] == ["      1 def f():", "----> 2     return 1 / 0"]


def test_the_run_views_pane_shows_the_folded_traceback_in_colour():
    exc = _caught(through_torch)
    failure = RankFailure(
        rank=0, exc_type="ValueError", message=str(exc), traceback="plain", frames=capture(exc)
    )
    for deliver in ("event", "show_error"):  # RunFinished's extra (view=True), or the panel's show_error
        view = RunView(refresh_interval=0)
        view(RunStarted(world_size=1, local_ranks=(0,), start_method="fork", config=None))
        extra = failure.finish_extra() if deliver == "event" else {}
        view(RunFinished("failed", 1.0, failed_rank=0, error="rank 0 raised ValueError", extra=extra))
        if deliver == "show_error":
            view.show_error(WorkerError(failure, []))
        pane = view.panes[0].value
        assert "\x1b" not in pane and "… 5 frames in torch …" in pane, deliver
        assert '<span style="color:#E75C58">ValueError</span>: bad forward on 3 rows' in pane, deliver
