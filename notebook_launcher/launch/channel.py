"""The parent<->worker messages: results, failures, metrics and progress over one pipe per rank.

Output does not travel here: each worker's file descriptors 1 and 2 are pipes the parent reads,
so C-level writes are captured too. Messages are pickled tuples `(kind, payload)`; return values
and exceptions inside them are cloudpickled, so notebook-defined classes survive the trip. Every
GPU tensor in a message is moved to the CPU here, in the worker (host_pickle.py says why).
"""

from __future__ import annotations

import pickle
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle

from .host_pickle import dumps_on_host

RESULT, ERROR, METRIC, PROGRESS, STARTED = "result", "error", "metric", "progress", "started"

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

    def _send(self, kind: str, payload: Any) -> None:
        self.conn.send_bytes(dumps_on_host((kind, payload), by_value=False))

    def send_started(self) -> None:
        self._send(STARTED, None)

    def send_result(self, value: Any) -> None:
        self._send(RESULT, dumps_on_host(value))

    def send_error(self, exc: BaseException) -> None:
        self._send(ERROR, describe_exception(exc))

    def telemetry_sink(self, kind: str, payload: dict[str, Any]) -> None:
        self._send(kind, payload)


def describe_exception(exc: BaseException) -> dict[str, Any]:
    """Everything the parent needs to report an exception, picklable no matter what."""
    try:
        pickled = dumps_on_host(exc)
    except Exception:
        pickled = None
    exc_type = type(exc).__name__
    message = str(exc)
    text = (exc_type + " " + message).lower()
    return {
        "exc_type": exc_type,
        "message": message,
        "traceback": "".join(traceback.format_exception(exc)),
        "time": time.monotonic(),
        "pickled": pickled,
        "secondary": exc_type in _SECONDARY_TYPES or any(s in text for s in _SECONDARY_TEXT),
    }


def decode(raw: bytes) -> tuple[str, Any]:
    return pickle.loads(raw)


def load_pickled(blob: bytes | None) -> Any:
    return None if blob is None else cloudpickle.loads(blob)
