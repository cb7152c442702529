"""The parent<->worker messages: results, failures, metrics and progress over one pipe per rank.

Output does not travel here: each worker's file descriptors 1 and 2 are pipes the parent reads,
so C-level writes are captured too. Messages are pickled tuples `(kind, payload)` of plain data;
user objects inside them (return values, exceptions, each logged metric value) are cloudpickled
one by one, so notebook-defined classes survive the trip and one object the parent cannot load
spoils nothing else. Every GPU tensor in a message is moved to the CPU here, in the worker
(host_pickle.py says why).
"""

from __future__ import annotations

import pickle
import select
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle

from .frames import capture, type_name
from .host_pickle import dumps_on_host

RESULT, ERROR, METRIC, PROGRESS, STARTED = "result", "error", "metric", "progress", "started"
CHECKPOINT, PREEMPTED = "checkpoint", "preempted"  # save_state() wrote one; the ranks agreed to stop
CHECKPOINT_WRITING = "checkpoint_writing"  # a background save's progress on this rank (async_save.py)
MEMORY = "memory"  # a rank's memory sample (launch/worker/memory_sampler.py)
PERFORMANCE = "performance"  # a rank's step breakdown so far (runtime/world/step_clock.py)
DISPLAY, CLEAR, BAR = "display", "clear", "bar"  # relayed display()/clear_output()/tqdm (relay.py)

# Failures that are the symptom of another rank dying (its peer connection closed), not a cause.
_SECONDARY_TYPES = ("DistBackendError", "DistNetworkError")
_SECONDARY_TEXT = (
    "connection closed by peer",
    "connection reset by peer",
    "broken pipe",
    "communicator was aborted",
    "socket closed",
)


class WorkerChannel:
    """The worker's end: one message per call, never raises into training code for telemetry."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._lock = threading.Lock()  # the memory sampler's thread sends too

    def _send(self, kind: str, payload: Any) -> None:
        data = dumps_on_host((kind, payload), by_value=False)
        with self._lock:
            self.conn.send_bytes(data)

    def send_started(self) -> None:
        self._send(STARTED, None)

    def send_result(self, value: Any) -> None:
        self._send(RESULT, {"pickled": dumps_on_host(value), "type": type_name(value)})

    def send_error(self, exc: BaseException) -> None:
        self._send(ERROR, describe_exception(exc))

    def telemetry_sink(self, kind: str, payload: dict[str, Any]) -> None:
        if kind == METRIC:
            payload = dict(payload, values=self._pickled_values(payload.get("values") or {}))
        if kind == CHECKPOINT_WRITING:
            self._send_if_room(kind, payload)
            return
        self._send(kind, payload)

    def _send_if_room(self, kind: str, payload: Any) -> None:
        """A progress message that must never block its sender: dropped when the pipe is full. A %%ranks
        rank between cells is not read by the kernel, and its checkpoint writer must not wait for the
        next cell because it reported its bytes."""
        data = dumps_on_host((kind, payload), by_value=False)
        with self._lock:
            if len(data) < select.PIPE_BUF and select.select([], [self.conn], [], 0)[1]:
                self.conn.send_bytes(data)

    def _pickled_values(self, values: dict[str, Any]) -> dict[str, bytes]:
        """Each logged value on its own; one that cannot be pickled is dropped with one warning."""
        pickled = {}
        for key, value in values.items():
            try:
                pickled[str(key)] = dumps_on_host(value)
            except Exception as exc:
                _warn_once(
                    f"unpicklable:{key}",
                    f"accelerator.log: the value of {key!r} ({type_name(value)}) cannot be sent to the notebook "
                    f"({type(exc).__name__}: {exc}); it is left out of the metrics. Log numbers or tensors.",
                )
        return pickled


_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    """Printed, not warnings.warn: a forked worker inherits the kernel's warning filters, which may
    hide or record it where nobody looks; its stderr always reaches the cell and the rank's log."""
    if key not in _warned:
        _warned.add(key)
        print(f"RuntimeWarning: {message}", file=sys.stderr, flush=True)


def describe_exception(exc: BaseException) -> dict[str, Any]:
    """Everything the parent needs to report an exception, picklable no matter what."""
    exc_type = type(exc).__name__
    try:
        message = str(exc)
    except Exception as str_failure:  # a broken __str__ must not cost the traceback
        message = f"<str() of the exception failed: {type(str_failure).__name__}: {str_failure}>"
    text = (exc_type + " " + message).lower()
    return {
        "exc_type": exc_type,
        "message": message,
        "traceback": "".join(traceback.format_exception(exc)),
        "frames": _captured(exc),
        "time": time.monotonic(),
        "pickled": _dumps_or_none(exc),
        "recipe": _dumps_or_none((type(exc), exc.args, dict(getattr(exc, "__dict__", {})))),
        "secondary": exc_type in _SECONDARY_TYPES or any(s in text for s in _SECONDARY_TEXT),
    }


def _captured(exc: BaseException) -> list[dict[str, Any]] | None:
    try:
        return capture(exc)
    except Exception:  # the text traceback above still tells the story
        return None


def _dumps_or_none(value: Any) -> bytes | None:
    try:
        return dumps_on_host(value)
    except Exception:
        return None


def rebuild_exception(info: dict[str, Any]) -> BaseException | None:
    """The worker's exception as an object here, or None.

    Plain unpickling calls the class with `exc.args`, which fails for exceptions whose __init__
    takes other arguments (`MyError(msg, code=42)` has args `(msg,)`); those are rebuilt from
    their class, args and attributes without calling __init__, as they were in the worker.
    """
    try:
        return load_pickled(info.get("pickled"))
    except Exception:
        pass
    try:
        kind, args, state = load_pickled(info.get("recipe"))
        exc = kind.__new__(kind, *args)
        exc.args = args
        exc.__dict__.update(state)
        return exc
    except Exception:
        return None


def decode(raw: bytes) -> tuple[str, Any]:
    return pickle.loads(raw)


def load_pickled(blob: bytes | None) -> Any:
    return None if blob is None else cloudpickle.loads(blob)
