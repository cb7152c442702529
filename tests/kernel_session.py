"""A real Jupyter kernel for tests: execute code, collect the cell's outputs, interrupt it."""

from __future__ import annotations

import queue
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from kernel_isolation import run_notebook, start_kernel


@dataclass
class CellRun:
    stdout: str = ""
    stderr: str = ""
    error: dict | None = None
    results: list = field(default_factory=list)
    displays: dict = field(default_factory=dict)  # display_id -> each data it showed, updates included
    status: str = ""
    first_output_at: float | None = None

    @property
    def text(self) -> str:
        return self.stdout + self.stderr

    @property
    def report(self) -> str:
        """What the cell printed and, if it raised, its whole traceback (colours removed): the message
        of a failed assertion about a cell."""
        if self.error is None:
            return self.text
        traceback = "\n".join(self.error.get("traceback", []))
        return self.text + re.sub(r"\x1b\[[0-9;]*m", "", traceback)


class KernelSession:
    def __init__(self, cwd: str | None = None) -> None:
        self.kernel = start_kernel(cwd)
        self.km, self.kc = self.kernel.km, self.kernel.kc

    @property
    def pid(self) -> int:
        return self.km.provisioner.process.pid

    def run(
        self, code: str, timeout: float = 120, interrupt_after_output: str | tuple[str, ...] | None = None
    ) -> CellRun:
        """Execute code; optionally interrupt the kernel once `interrupt_after_output` was printed
        (every one of them, when several are given)."""
        if isinstance(interrupt_after_output, str):
            interrupt_after_output = (interrupt_after_output,)
        msg_id = self.kc.execute(code)
        run = CellRun()
        deadline = time.monotonic() + timeout
        interrupted = False
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"cell did not finish in {timeout}s; output so far:\n{run.text}")
            try:
                msg = self.kc.get_iopub_msg(timeout=min(remaining, 1.0))
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                run.first_output_at = run.first_output_at or time.monotonic()
                if content["name"] == "stdout":
                    run.stdout += content["text"]
                else:
                    run.stderr += content["text"]
            elif kind == "error":
                run.error = content
            elif kind in ("execute_result", "display_data"):
                run.results.append(content["data"])
            if kind in ("display_data", "update_display_data"):
                display_id = content.get("transient", {}).get("display_id", "")
                run.displays.setdefault(display_id, []).append(content["data"])
            elif kind == "status" and content["execution_state"] == "idle":
                break
            if (
                interrupt_after_output
                and not interrupted
                and all(text in run.text for text in interrupt_after_output)
            ):
                self.km.interrupt_kernel()
                run.status = "interrupted"
                interrupted = True
        return run

    def value(self, expr: str):
        """Evaluate an expression in the kernel and return its repr as Python literal (via ast)."""
        import ast

        out = self.run(f"print(repr({expr}))")
        if out.error:
            raise RuntimeError(f"{out.error['ename']}: {out.error['evalue']}")
        return ast.literal_eval(out.stdout.strip().splitlines()[-1])

    def close(self) -> None:
        self.kernel.close()


# nbformat is imported where a notebook is read or made, not when a test module is collected: every
# xdist worker collects the whole suite, and nbformat's v4 validators cost it about 1.7 s of CPU.
def read_notebook(path: Path):
    """The notebook at `path`, as nbformat version 4."""
    import nbformat

    return nbformat.read(path, as_version=4)


def code_cell(source: str):
    """A new code cell holding `source`."""
    import nbformat

    return nbformat.v4.new_code_cell(source)


def new_notebook(cells: list):
    """A new version-4 notebook of `cells`."""
    import nbformat

    return nbformat.v4.new_notebook(cells=cells)


def execute_notebook(nb, workdir: Path, cell_timeout: float) -> float:
    """Run every cell of `nb` in a fresh python3 kernel started in workdir (nbclient; raises on the
    first error); the seconds it took."""
    start = time.monotonic()
    run_notebook(nb, str(workdir), timeout=cell_timeout)
    return time.monotonic() - start
