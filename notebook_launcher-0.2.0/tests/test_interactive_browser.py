"""%%ranks in a real JupyterLab 4 and a real Notebook 7, driven by headless Chromium (issue 15):
each rank's output appears in the cell, and the cell is highlighted as Python."""

from __future__ import annotations

import pytest
from browser_support import ARTIFACTS, BROWSER_TEST
from browser_support import jupyterlab as jl

pytestmark = BROWSER_TEST

CELLS = [
    "%load_ext notebook_launcher\n%ranks start 2",
    "%%ranks\nimport torch.distributed as dist\nfor step in range(3):\n    print(f'step {step} on rank {dist.get_rank()}')",
    "%ranks stop",
]

# The colour CodeMirror gives each token of cell `index`'s editor: Python highlighting colours
# keywords (for, import) differently from names (step, dist).
TOKEN_COLOURS = r"""(index) => {
  const cell = window.jupyterapp.shell.currentWidget.content.widgets[index];
  const colours = {};
  cell.node.querySelectorAll('.cm-content .cm-line span').forEach((span) => {
    colours[span.textContent.trim()] = getComputedStyle(span).color;
  });
  colours['(line)'] = getComputedStyle(cell.node.querySelector('.cm-content .cm-line')).color;
  return colours;
}"""

OUTPUT_TEXT = r"""(index) => {
  const cell = window.jupyterapp.shell.currentWidget.content.widgets[index];
  return cell.outputArea.node.innerText;
}"""


@pytest.fixture(scope="module")
def scratch():
    yield from jl.scratch_dir("nl-ranks-browser-")


@pytest.fixture(scope="module")
def notebook_dir(scratch):
    return jl.lab_root(scratch, {"ranks.ipynb": CELLS})


def test_a_ranks_cell_shows_every_ranks_output_and_is_highlighted_as_python(
    playwright, lab, scratch, request
):
    profile = str(scratch / f"chromium-{request.node.name}")
    with jl.notebook_page(playwright, lab, profile, "ranks.ipynb") as page:
        jl.wait_kernel_idle(page)
        assert jl.error_outputs(page) == []
        shown = page.evaluate(OUTPUT_TEXT, 1)
        for rank in (0, 1):
            lines = [f"[rank{rank}] step {step} on rank {rank}" for step in range(3)]
            assert all(line in shown for line in lines), shown
            assert [
                line for line in shown.splitlines() if line.startswith(f"[rank{rank}]")
            ] == lines  # in order
        assert "rank 1: idle" in page.evaluate(OUTPUT_TEXT, 0)
        assert "ranks: stopped" in page.evaluate(OUTPUT_TEXT, 2)
        colours = page.evaluate(TOKEN_COLOURS, 1)
        plain = colours["(line)"]
        assert colours.get("for", plain) != plain and colours.get("import", plain) != plain, colours
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"{request.node.name}-ranks.png"))
