"""The rank side of %%ranks: one long-lived process per rank that runs what the kernel sends.

It starts as a launch's worker does (launch/worker/entry.py: output to the kernel's pipes, dies with the
kernel, the env contract), brings its process group up, says READY, then answers commands one by
one until told to exit: run a cell in this rank's namespace, call a function, pull or push names.
Every command gets exactly one REPLY, also when the user's code raised or was interrupted, so the
rank stays usable. Imports nothing heavy at module level (under spawn the env comes first).
"""

from __future__ import annotations

import os
from multiprocessing.connection import Connection
from typing import Any

from ..launch.worker.channel import WorkerChannel, describe_exception
from . import execution, protocol

execution.own_module(__file__)


class Replies(WorkerChannel):
    """The rank's end of the message pipe: the launch's worker channel (same envelope, metrics and
    progress as in a launch) plus READY and one REPLY per command."""

    def send(self, kind: str, payload: Any) -> None:
        self._send(kind, payload)

    def ok(self, command_id: int, value: bytes | None = None) -> None:
        self._send(protocol.REPLY, {"id": command_id, "ok": True, "value": value, "error": None})

    def failed(self, command_id: int, exc: BaseException) -> None:
        error = describe_exception(execution.without_own_frames(exc))
        self._send(protocol.REPLY, {"id": command_id, "ok": False, "value": None, "error": error})


def serve_rank(
    spec: Any,
    out_conn: Connection,
    err_conn: Connection,
    msg_conn: Connection,
    cmd_conn: Connection,
    state: Any = None,
) -> None:
    """Entry point of every rank process (fork, spawn and forkserver alike); never returns.

    `state` (a standby.LaunchState) comes with ranks forked by the warm pool's server, which was
    started earlier: the kernel's env, cwd and sys.path as they are now, and fresh generators."""
    from ..launch.worker.entry import prepare_process
    from ..launch.worker.standby import adopt

    prepare_process(out_conn, err_conn)
    if state is not None:
        adopt(state)
    os.environ.update(spec.env)
    replies = Replies(msg_conn)
    from ..launch.worker import relay

    relay.connect(replies.telemetry_sink)  # display() and tqdm in a cell reach the kernel's cell
    code = 0
    try:
        replies.send_started()
        _start_rank(spec, replies)
        _command_loop(cmd_conn, replies, spec.rank)
    except BaseException as exc:  # noqa: BLE001 - a rank that cannot start says why, then exits
        code = 1
        try:
            replies.failed(-1, exc)
        except Exception:  # noqa: BLE001 - the kernel is gone; nobody to tell
            pass
    finally:
        execution.flush_streams()
    # No destructors: tearing down gloo while peers are gone can hang (see launch/worker/entry.py).
    os._exit(code)


def _start_rank(spec: Any, replies: Replies) -> None:
    """Threads, telemetry and the process group, as `Accelerator()` in a launch would set them up."""
    from ..config import config_from_env
    from ..runtime import telemetry
    from ..runtime.world.state import exit_without_teardown, get_state

    exit_without_teardown()
    if spec.threads is not None:
        import torch

        torch.set_num_threads(spec.threads)
    telemetry.set_sink(replies.telemetry_sink)
    state = get_state(config_from_env())
    execution.install_interrupt_gate()
    replies.send(protocol.READY, {"pid": os.getpid(), "device": str(state.device), "backend": state.backend})


def _command_loop(cmd_conn: Connection, replies: Replies, rank: int) -> None:
    namespace = execution.fresh_namespace()
    while True:
        try:
            command, command_id, payload = protocol.decode(cmd_conn.recv_bytes())
        except KeyboardInterrupt:  # the stop button between cells: nothing to interrupt
            continue
        except EOFError:  # the kernel closed the pipe: it is gone or stopping us
            return
        if command == protocol.EXIT:
            return
        try:
            value = _run(command, payload, namespace, rank)
        except BaseException as exc:  # noqa: BLE001 - the user's error goes to the cell, the rank lives on
            execution.close_interrupt_gate()
            execution.flush_streams()
            replies.failed(command_id, exc)
            continue
        execution.flush_streams()
        replies.ok(command_id, value)


def _run(command: str, payload: dict[str, Any], namespace: dict[str, Any], rank: int) -> bytes | None:
    from ..launch.worker.host_pickle import dumps_on_host

    if command == protocol.EXEC:
        value = execution.run_cell(payload["code"], namespace, payload["filename"])
        if payload.get("show") and value is not None:
            print(execution.value_repr(value), flush=True)
        return dumps_on_host(value) if payload.get("want_value") else None
    if command == protocol.CALL:
        import cloudpickle

        fn, args, kwargs = cloudpickle.loads(payload["payload"])
        return dumps_on_host(execution.call_function(fn, args, kwargs))
    if command == protocol.PULL:
        name = payload["name"]
        if name not in namespace:
            raise NameError(f"name {name!r} is not defined on rank {rank}")
        return dumps_on_host(namespace[name])
    if command == protocol.PUSH:
        import cloudpickle

        namespace.update(cloudpickle.loads(payload["values"]))
        return None
    raise ValueError(f"unknown %%ranks command {command!r}")
