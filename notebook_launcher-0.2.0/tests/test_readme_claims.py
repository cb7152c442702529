"""What the README states about the code stays true: notebook_launch's signature as shown, the
example notebooks it lists (and docs/notebooks.md's table), the errors it names importable."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import notebook_launcher

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))


def test_the_signature_shown_is_notebook_launchs():
    shown = re.search(r"```python\nnotebook_launch\((.*?)\) -> LaunchResult\n```", README, re.S).group(1)
    shown_names = [part.split("=")[0].strip().lstrip("*") for part in shown.split(",")]
    shown_names = [name for name in shown_names if name]
    real = list(inspect.signature(notebook_launcher.notebook_launch).parameters)
    assert shown_names == real, f"README shows {shown_names}, the code has {real}"


def test_the_notebook_list_spans_notebooks_folder():
    section = README.split("## Example notebooks", 1)[1].split("\n## ", 1)[0]
    assert f"`notebooks/{NOTEBOOKS[0]}` … `{NOTEBOOKS[-1]}`" in section, (NOTEBOOKS[0], NOTEBOOKS[-1])
    table = (ROOT / "docs" / "notebooks.md").read_text()
    missing = [name for name in NOTEBOOKS if f"[`{name}`](../notebooks/{name}.ipynb)" not in table]
    assert not missing, f"docs/notebooks.md's table lacks {missing}"


def test_every_error_the_readme_names_is_importable():
    named = set(re.findall(r"`([A-Z]\w*(?:Error|Interrupted|Timeout|Stopped|Preempted|Stalled))`", README))
    assert {"LaunchInterrupted", "WorkerWidgetError", "WorkerError"} <= named
    named.discard("ChildFailedError")  # torch elastic's, which a WorkerError also is
    missing = [name for name in sorted(named) if not hasattr(notebook_launcher, name)]
    assert not missing, f"named in the README, not importable from notebook_launcher: {missing}"
