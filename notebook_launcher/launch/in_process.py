"""Run the function in the calling process as rank 0 of a world of one (debugging, `%debug`).

Asked for with `notebook_launch(fn, num_processes=1, in_process=True)`: the exception is the
original one (so a debugger lands in the user's frame), output goes straight to the cell, and the
environment and runtime state are restored afterwards so the kernel is left as it was.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from typing import Any

from ..config import LaunchConfig, patched_environ, worker_env
from ..records.names import LOOPBACK, RUN_DIR_ENV
from ..system.private_files import make_private_dir
from .result import LaunchResult, metric_row


def run_in_process(fn: Callable[..., Any], args: tuple, kwargs: dict, config: LaunchConfig) -> LaunchResult:
    from ..runtime import reset_state, telemetry
    from ..runtime.checkpointing.async_save import wait_for_checkpoints
    from ..system.hardware import ranks_run_on_cpu

    cpu_world = ranks_run_on_cpu(config.runs_on_cpu)
    env = worker_env(  # rank 0 of a world of one, no rendezvous
        rank=0,
        local_rank=0,
        group_rank=0,
        world_size=1,
        local_world_size=1,
        master_addr=LOOPBACK,
        master_port=0,
        config=config,
        cpu_world=cpu_world,
    )
    metrics: list[dict[str, Any]] = []

    def sink(kind: str, payload: dict[str, Any]) -> None:
        if kind == "metric":
            metrics.append(metric_row(0, payload.get("step"), payload["time"], payload["values"]))

    start = time.monotonic()
    reset_state()
    telemetry.set_sink(sink)
    env[RUN_DIR_ENV] = make_private_dir()  # what the run writes for itself; removed below
    try:
        with patched_environ(env):
            value = fn(*args, **kwargs)
            wait_for_checkpoints("the end of the launched function")  # an async save_state still writing
    finally:
        telemetry.set_sink(None)
        reset_state()
        shutil.rmtree(env[RUN_DIR_ENV], ignore_errors=True)
    return LaunchResult(
        [value],
        ranks=[0],
        logs={0: ""},
        metrics=metrics,
        duration=time.monotonic() - start,
        start_method="in_process",
        world_size=1,
    )
