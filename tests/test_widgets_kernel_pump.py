"""The Stop button of a RunView works while a cell blocks: a real kernel, a real comm message.

The test plays the browser: it sends the widget click (a comm_msg on the shell channel) while a
cell is blocked in a loop calling `view.poll()`, like a blocking launch's poll hook does, and
queues another cell behind it, which must still run afterwards, in order.
"""

from __future__ import annotations

import queue
import time

import pytest

pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")

from kernel_isolation import start_kernel  # noqa: E402 - after the skips

SETUP = """
from notebook_launcher.widgets import RunView
view = RunView()
display(view)
print("STOP_ID", view.stop_button.model_id)
"""

BLOCKING = """
import time
t0 = time.time()
while not view.poll() and time.time() - t0 < 30:
    time.sleep(0.05)
print("BLOCKED_CELL_SAW_STOP", view.stop_requested, "after", round(time.time() - t0, 1))
"""

QUEUED = 'print("QUEUED_CELL_RAN", view.stop_requested)'


@pytest.fixture
def kernel():
    started = start_kernel()
    try:
        yield started.kc
    finally:
        started.close()


def wait_until_running(client, msg_id: str, timeout: float) -> None:
    """Until the kernel has begun executing request msg_id (its execute_input on iopub)."""
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"{msg_id} did not start within {timeout} s"
        try:
            msg = client.get_iopub_msg(timeout=remaining)
        except queue.Empty:
            continue
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "execute_input":
            return


def stream_text(client, msg_id: str, timeout: float) -> str:
    """Every stdout text of one request, read until the kernel is idle for it."""
    text = []
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"no idle status for {msg_id} within {timeout} s; got {''.join(text)!r}"
        try:
            msg = client.get_iopub_msg(timeout=remaining)
        except queue.Empty:
            continue
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream":
            text.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            raise AssertionError("\n".join(msg["content"]["traceback"]))
        elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return "".join(text)


@pytest.mark.parametrize("subshell_id", [None, "frontend-subshell"], ids=["plain", "jupyterlab-4.6-style"])
def test_stop_click_reaches_a_blocked_cell_and_queued_cells_still_run(kernel, subshell_id):
    setup = kernel.execute(SETUP)
    out = stream_text(kernel, setup, 60)
    stop_id = out.split("STOP_ID", 1)[1].split()[0]

    blocked = kernel.execute(BLOCKING)
    queued = kernel.execute(QUEUED)  # sits in the kernel's queue behind the blocked cell
    wait_until_running(kernel, blocked, 60)  # the click must reach the cell while it polls
    click = kernel.session.msg(
        "comm_msg", {"comm_id": stop_id, "data": {"method": "custom", "content": {"event": "click"}}}
    )
    if subshell_id:  # JupyterLab 4.6 tags widget messages with a subshell id of its own
        click["header"]["subshell_id"] = subshell_id
    kernel.shell_channel.send(click)

    blocked_out = stream_text(kernel, blocked, 40)
    # True only if the click was handled while the cell still polled (else the loop ends at 30 s
    # with False): no wall-clock bound needed
    assert "BLOCKED_CELL_SAW_STOP True" in blocked_out, blocked_out
    assert "QUEUED_CELL_RAN True" in stream_text(kernel, queued, 30)
    # the kernel keeps working normally afterwards
    assert "4" in stream_text(kernel, kernel.execute("print(2 + 2)"), 30)
