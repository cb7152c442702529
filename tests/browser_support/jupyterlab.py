"""Driving JupyterLab 4 and Notebook 7 in Debian's headless Chromium with Playwright.

Waits use the status bar's kernel state and the app object (window.jupyterapp, exposed by the
LabServer), never fixed sleeps.
"""

from __future__ import annotations

import contextlib
import re
import tempfile
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"  # Debian's package; Playwright is not allowed to download a browser
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"]
NOTEBOOK = ".jp-NotebookPanel:not(.lm-mod-hidden)"

# JupyterLab: its status bar reads "Python 3 (ipykernel) | Idle". Notebook 7 has no status bar:
# ask the notebook's session context (window.jupyterapp) instead.
KERNEL_IDLE = r"""() => {
  const bar = document.querySelector('#jp-main-statusbar');
  if (bar) return /\|\s*Idle\b/.test(bar.innerText) && !/No Kernel/.test(bar.innerText);
  const panel = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const context = panel && panel.sessionContext;
  return !!context && !!context.session && context.kernelDisplayStatus === 'idle';
}"""


def _each_code_output(body: str) -> str:
    """A page script that runs `body` for output `i` of each code cell (`cell`, `index`, `outputs`)
    of the open notebook and returns what it pushed onto `found`."""
    return (
        "() => {\n  const found = [];\n"
        "  window.jupyterapp.shell.currentWidget.content.widgets.forEach((cell, index) => {\n"
        "    if (cell.model.type !== 'code') return;\n"
        "    const outputs = cell.model.outputs;\n"
        "    for (let i = 0; i < outputs.length; i++) {\n"
        f"{body}\n"
        "    }\n  });\n  return found;\n}"
    )


ERRORS = _each_code_output(
    "      const out = outputs.get(i).toJSON();\n"
    "      if (out.output_type === 'error') found.push({cell: index, ename: out.ename, evalue: out.evalue});"
)

# For each widget output: did it render as a widget, or fall back to its text repr?
WIDGET_OUTPUTS = _each_code_output(
    "      if (!(outputs.get(i).data || {})['application/vnd.jupyter.widget-view+json']) continue;\n"
    "      const node = cell.outputArea.widgets[i] ? cell.outputArea.widgets[i].node : null;\n"
    "      found.push({cell: index, rendered: !!(node && node.querySelector('.jupyter-widgets'))});"
)

# Each output of the open notebook, for a failure's description: its type, its MIME types, and for a
# widget view whether a widget rendered there.
OUTPUTS = _each_code_output(
    "      const out = outputs.get(i).toJSON();\n"
    "      const data = out.data || {};\n"
    "      const node = cell.outputArea.widgets[i] ? cell.outputArea.widgets[i].node : null;\n"
    "      found.push({cell: index, type: out.output_type, mime: Object.keys(data),\n"
    "                  widget: !!data['application/vnd.jupyter.widget-view+json'],\n"
    "                  rendered: !!(node && node.querySelector('.jupyter-widgets')),\n"
    "                  text: String(out.text || data['text/plain'] || out.evalue || '').slice(0, 200)});"
)

WIDGET_REPR = re.compile(r"^[A-Z]\w*\((children|description|value|options|layout|outputs)=")
BAD_TEXTS = ("Loading widget...", "Error displaying widget", "Model not found", "Failed to load model class")


def scratch_dir(prefix: str) -> Iterator[Path]:
    """An own temp dir for a module's fixture (`yield from`): pytest's shared basetemp can be pruned
    by another pytest run on the machine."""
    with tempfile.TemporaryDirectory(prefix=prefix) as path:
        yield Path(path)


def lab_root(scratch: Path, notebooks: dict[str, list[str]]) -> Path:
    """scratch/lab-root holding each notebook of `notebooks` (name -> its cells' code) for the
    python3 kernel, so JupyterLab opens it without asking for a kernel."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    root = scratch / "lab-root"
    root.mkdir()
    for name, cells in notebooks.items():
        nb = new_notebook(cells=[new_code_cell(code) for code in cells])
        nb.metadata["kernelspec"] = {
            "name": "python3",
            "display_name": "Python 3 (ipykernel)",
            "language": "python",
        }
        nbformat.write(nb, root / name)
    return root


def launch_browser(playwright: Any, profile_dir: str, viewport: tuple[int, int] = (1400, 1000)) -> Any:
    """A persistent Chromium context on a fresh profile."""
    return playwright.chromium.launch_persistent_context(
        profile_dir,
        executable_path=CHROMIUM,
        headless=True,
        args=CHROMIUM_ARGS,
        viewport={"width": viewport[0], "height": viewport[1]},
    )


_CONSOLE: weakref.WeakKeyDictionary[Any, list[str]] = weakref.WeakKeyDictionary()


def keep_console(page: Any, lines: int = 50) -> None:
    """Keep the page's last `lines` console messages (debug ones aside), for describe()."""
    kept = _CONSOLE.setdefault(page, [])

    def keep(message: Any) -> None:
        if message.type == "debug":  # extensions registering commands: noise
            return
        kept.append(f"{time.strftime('%H:%M:%S')} {message.type}: {message.text[:300]}")
        del kept[:-lines]

    page.on("console", keep)


def describe(page: Any, lab: Any) -> str:
    """What a failed wait needs to be understood from CI's output alone: the kernel's state, each
    output of the open notebook, the page's last console messages, the server log's tail."""
    parts = []
    for name, read in (
        ("kernel idle", lambda: page.evaluate(KERNEL_IDLE)),
        ("outputs", lambda: "\n  ".join(map(str, page.evaluate(OUTPUTS)))),
    ):
        try:
            parts.append(f"{name}: {read()}")
        except Exception as exc:  # noqa: BLE001 - a page that cannot answer: say so, go on
            parts.append(f"{name}: (page did not answer: {exc})")
    parts.append("console:\n  " + "\n  ".join(_CONSOLE.get(page, ["(not kept)"])))
    try:
        log = lab.log_path.read_text(errors="replace").splitlines()[-40:]
    except OSError as exc:
        log = [f"(unreadable: {exc})"]
    parts.append(f"server log ({lab.log_path}), last lines:\n  " + "\n  ".join(log))
    return "\n".join(parts)


def wait_visible(page: Any, lab: Any, selector: str, nth: int = 0, timeout_ms: float | None = None) -> None:
    """Wait until match `nth` of `selector` is visible; on timeout, fail with describe()."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.locator(selector).nth(nth).wait_for(state="visible", timeout=timeout_ms)
    except PlaywrightTimeout as exc:
        count = page.locator(selector).count()
        raise AssertionError(
            f"{selector} #{nth} not visible ({count} on the page): {exc}\n{describe(page, lab)}"
        ) from None


def open_notebook(page: Any, lab: Any, notebook: str, timeout_ms: int = 90_000) -> None:
    """Open a notebook (it needs metadata.kernelspec) and wait until its kernel is idle."""
    page.goto(lab.notebook_url(notebook))
    page.wait_for_selector(f"{NOTEBOOK} .jp-Cell", timeout=timeout_ms)
    wait_kernel_idle(page, timeout_ms)


def wait_kernel_idle(page: Any, timeout_ms: int = 90_000) -> None:
    page.wait_for_function(KERNEL_IDLE, timeout=timeout_ms, polling=100)


def run_all_cells(page: Any) -> bool:
    """Run every cell; returns when the run is over: True, or False when a cell raised."""
    return page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")


def error_outputs(page: Any) -> list[dict]:
    return page.evaluate(ERRORS)


def widget_problems(page: Any) -> list[str]:
    """Signs that a widget did not render (it then shows as its text repr, e.g. 'VBox(children=...')."""
    body = page.inner_text("body")
    problems = [text for text in BAD_TEXTS if text in body]
    for text in page.locator(f"{NOTEBOOK} .jp-OutputArea-output").all_inner_texts():
        if WIDGET_REPR.match(text.strip()):
            problems.append("widget shown as text: " + text.strip()[:80])
    problems += [f"not rendered: {w}" for w in page.evaluate(WIDGET_OUTPUTS) if not w["rendered"]]
    return problems


@contextlib.contextmanager
def notebook_page(
    playwright: Any, lab: Any, profile_dir: str, notebook: str, timeout_ms: int = 60_000
) -> Any:
    """A browser on `notebook` with every cell started; closed (and the kernel's session removed) after."""
    browser = launch_browser(playwright, profile_dir)
    try:
        page = browser.new_page()
        page.set_default_timeout(timeout_ms)
        open_notebook(page, lab, notebook)
        assert run_all_cells(page) is True, error_outputs(page)
        yield page
        page.close()
    finally:
        browser.close()
        lab.delete_sessions()
