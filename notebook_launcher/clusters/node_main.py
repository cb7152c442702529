"""`python -m notebook_launcher.clusters.node_main`: one node's ranks in a clean process.

An engine's agent (the Ray actor) starts this instead of launching from its own process: an actor
process runs the engine's threads, which forked workers must not inherit, and spawned workers
would each re-import the engine. Here the local launcher forks as it does in a notebook.

Protocol: the agent writes one pickled NodeJob to stdin; this process answers on its original
stdout with length-prefixed cloudpickled frames — ("ready", (addr, port)), ("event", event),
("note", text), and finally ("outcome", NodeOutcome) or ("crash", traceback). Its own fd 1 is
pointed at stderr, so nothing else can corrupt the frames. SIGTERM stops the ranks (Stop); the
process dies with its agent (PR_SET_PDEATHSIG), and its workers die with it.
"""

from __future__ import annotations

import os
import pickle
import signal
import struct
import sys
import threading
import traceback
from typing import IO, Any

import cloudpickle

from ..system.parent_death import die_with_parent


class FrameWriter:
    """Length-prefixed frames on a private copy of stdout, safe to call from several threads."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self.lock = threading.Lock()

    def __call__(self, kind: str, payload: Any) -> None:
        data = cloudpickle.dumps((kind, payload))
        with self.lock:
            self.stream.write(struct.pack("!Q", len(data)) + data)
            self.stream.flush()


def read_frame(stream: IO[bytes]) -> tuple[str, Any] | None:
    """The next frame, or None at the end of the stream."""
    header = stream.read(8)
    if len(header) < 8:
        return None
    (size,) = struct.unpack("!Q", header)
    return pickle.loads(stream.read(size))


def main() -> None:
    frames_fd = os.dup(1)
    os.dup2(2, 1)  # stray prints go to stderr, never into the frames
    send = FrameWriter(os.fdopen(frames_fd, "wb"))
    die_with_parent()
    job = pickle.loads(sys.stdin.buffer.read())
    try:
        from .node import NodeRun

        node = NodeRun(job, emit=lambda event: send("event", event), say=lambda text: send("note", text))
        signal.signal(signal.SIGTERM, lambda *_: node.stop())
        send("ready", node.address)
        send("outcome", node.run())
    except BaseException:  # noqa: BLE001 - the agent must hear about it
        send("crash", traceback.format_exc())
    finally:
        sys.stdout.flush()
    os._exit(0)  # no gloo or store teardown in destructors: the outcome is sent


if __name__ == "__main__":
    main()
