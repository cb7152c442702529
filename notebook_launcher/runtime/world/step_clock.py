"""Where each optimizer step's time goes on this rank: waiting for data, computing, or waiting for
the other ranks — the numbers behind the launcher's straggler verdict (docs/performance.md).

Measured with `time.perf_counter()` at points the runtime already passes, never with a device sync:
- data: inside the prepared loader's `__next__` (runtime/data/loader.py);
- compute: the prepared model's forward (module hooks), `accelerator.backward()` and the optimizer
  step — less the waits below;
- wait: torch.distributed collectives called from Python (collective_log.py wraps them), and DDP's
  gradient all-reduce, seen on the CPU as the time between the last gradient computed on this rank
  (a post-accumulate-grad hook on every parameter) and the end of backward(): a rank that arrives
  early at the all-reduce waits there for the late one.
On a GPU, kernels run asynchronously: the CPU-side figures show where the host waits (data, a
collective's host side), and compute/wait are split only where the host itself blocks. The clock is
on inside a launch (the launcher reads it) or with NOTEBOOK_LAUNCHER_REPORT_PERFORMANCE=1, and off
with NOTEBOOK_LAUNCHER_REPORT_PERFORMANCE=0.
"""

from __future__ import annotations

import atexit
import json
import os
import time
from typing import Any

from ...records.names import REPORT_ENV
from ...system.private_files import is_private_dir, write_private
from .. import telemetry

SEND_EVERY_S = 0.5
WARMUP_STEPS = 0  # extra steps left out after the first (which has no start to measure from)
PARTS = ("data", "forward", "backward", "optimizer", "wait")


class StepClock:
    """One per process. `_open` accumulates the current step; `totals` the measured steps."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.enabled = False
        self.totals: dict[str, float] = dict.fromkeys((*PARTS, "step"), 0.0)
        self.steps = 0
        self._open: dict[str, float] = dict.fromkeys(PARTS, 0.0)
        self._seen = 0
        self._boundary: float | None = None
        self._last_grad = 0.0
        self._forward_began = 0.0
        self._sent = 0.0
        self.pipeline: dict[str, Any] | None = None  # a pipeline rank's last step (its timeline)

    # --------------------------------------------------------------- recording
    def add(self, part: str, seconds: float) -> None:
        if self.enabled:
            self._open[part] += seconds

    def forward_began(self) -> None:
        self._forward_began = time.perf_counter()

    def forward_ended(self) -> None:
        if self._forward_began:
            self.add("forward", time.perf_counter() - self._forward_began)
            self._forward_began = 0.0

    def gradient_arrived(self) -> None:
        self._last_grad = time.perf_counter()

    def backward(self, run: Any) -> None:
        """Time `run()` (the backward pass): compute up to the last local gradient, wait after it."""
        began = self._last_grad = time.perf_counter()
        waited_in_collectives = self._open["wait"]
        run()
        ended = time.perf_counter()
        if not self.enabled:
            return
        waited = max(0.0, ended - max(self._last_grad, began))
        self._open["backward"] += (ended - began) - waited - (self._open["wait"] - waited_in_collectives)
        self._open["wait"] += waited

    def optimizer_step(self, run: Any) -> Any:
        began = time.perf_counter()
        waited_in_collectives = self._open["wait"]
        try:
            return run()
        finally:
            if self.enabled:
                spent = time.perf_counter() - began
                self._open["optimizer"] += spent - (self._open["wait"] - waited_in_collectives)
                self.step_done()

    def step_done(self) -> None:
        now = time.perf_counter()
        if self._boundary is not None:
            self._seen += 1
            if self._seen > WARMUP_STEPS:
                self.steps += 1
                self.totals["step"] += now - self._boundary
                for part in PARTS:
                    self.totals[part] += self._open[part]
        self._boundary = now
        self._open = dict.fromkeys(PARTS, 0.0)
        if self.steps and now - self._sent > SEND_EVERY_S:
            self._sent = now
            self._send()

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "steps": self.steps,
            **{f"{name}_s": value for name, value in self.totals.items()},
        }
        if self.pipeline is not None:
            out["pipeline"] = self.pipeline
        return out

    def metrics(self) -> dict[str, float]:
        """Per-step means in milliseconds, under keys accelerator.log() takes as they are."""
        if not self.steps:
            return {}
        per_step = {name: value / self.steps * 1000 for name, value in self.totals.items()}
        return {f"performance/{name}_ms": round(value, 3) for name, value in per_step.items()}

    def flush(self) -> None:
        """Send the last figures (the worker calls this before it reports its result)."""
        if self.enabled and self.steps:
            self._send()

    def _send(self) -> None:
        """To the notebook's launcher; under the CLI's --report_performance, into its folder."""
        telemetry.emit("performance", **self.summary())
        folder = os.environ.get(REPORT_ENV, "")
        if is_private_dir(folder):  # the CLI's folder inside its run directory, never another's
            try:
                write_private(folder, f"rank{os.environ.get('RANK', '0')}.json", json.dumps(self.summary()))
            except OSError:
                pass


CLOCK = StepClock()


def switch_on_if_watched() -> bool:
    """On inside a launch, or when the CLI asked for the report; off (free) otherwise."""
    global CLOCK
    if CLOCK.pid != os.getpid():  # a forked worker starts its own figures, not its parent's
        CLOCK = StepClock()
    asked = os.environ.get(REPORT_ENV, "")
    CLOCK.enabled = asked != "0" and (telemetry.has_sink() or asked != "")
    if CLOCK.enabled and is_private_dir(os.environ.get(REPORT_ENV, "")):
        atexit.register(lambda: CLOCK.flush())  # a script's last steps, at its end
    return CLOCK.enabled


def watch_model(model: Any) -> None:
    """Hook a prepared model once: forward time, and when each parameter's gradient is ready."""
    if not CLOCK.enabled or getattr(model, "_nl_step_clock", False):
        return
    model.register_forward_pre_hook(lambda *_: CLOCK.forward_began())
    model.register_forward_hook(lambda *_: CLOCK.forward_ended())
    for parameter in model.parameters():
        if parameter.requires_grad and hasattr(parameter, "register_post_accumulate_grad_hook"):
            parameter.register_post_accumulate_grad_hook(lambda _: CLOCK.gradient_arrived())
    model._nl_step_clock = True
