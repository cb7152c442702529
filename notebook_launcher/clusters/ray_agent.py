"""The Ray actor on each node of a Ray launch: starts that node's ranks in a clean subprocess
(node_main.py) and relays what it says to the notebook, which polls `drain()`.

One actor per node, placed by a placement group bundle that reserves the resources of all the
node's ranks. It is a threaded actor (max_concurrency), so `drain()` and `stop()` are served while
`start()`'s subprocess runs. Killing the actor kills the subprocess and its workers (each dies
with its parent).
"""

from __future__ import annotations

import collections
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from .node import NodeJob, NodeOutcome
from .node_main import read_frame

READY_TIMEOUT_SECONDS = 300.0


class NodeAgent:
    """start(job) -> rendezvous address; drain() -> (events, notes, outcome or None); stop()."""

    def __init__(self, command_prefix: tuple[str, ...] = ()) -> None:
        self.command_prefix = tuple(command_prefix)  # e.g. `ip netns exec NS` in the tests
        self.events: collections.deque = collections.deque()
        self.notes: collections.deque = collections.deque()
        self.outcome: NodeOutcome | None = None
        self.crash: str | None = None
        self.ready = threading.Event()
        self.finished = threading.Event()  # the launcher process is gone and every frame is read
        self.address: tuple[str, int] | None = None
        self.process: subprocess.Popen[bytes] | None = None

    def node_ip(self) -> str:
        """This node's address, as Ray knows it (the other nodes reach node 0 there)."""
        import ray

        return str(ray.util.get_node_ip_address())

    def start(self, job: NodeJob) -> tuple[str, int]:
        """Start the node's ranks; return once the rendezvous address is known (node 0 hosts it)."""
        self.process = subprocess.Popen(
            [*self.command_prefix, sys.executable, "-m", "notebook_launcher.clusters.node_main"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=_clean_env(),
        )
        assert self.process.stdin is not None
        self.process.stdin.write(pickle.dumps(job))
        self.process.stdin.close()
        threading.Thread(target=self._read, daemon=True).start()
        if not self.ready.wait(READY_TIMEOUT_SECONDS):
            raise RuntimeError(
                f"node {job.node_rank}: its launcher did not start within {READY_TIMEOUT_SECONDS:.0f} s"
            )
        if self.crash is not None:
            raise RuntimeError(f"node {job.node_rank}: its launcher failed while starting:\n{self.crash}")
        assert self.address is not None
        return self.address

    def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        while True:
            frame = read_frame(self.process.stdout)
            if frame is None:
                break
            kind, payload = frame
            if kind == "event":
                self.events.append(payload)
            elif kind == "note":
                self.notes.append(payload)
            elif kind == "ready":
                self.address = tuple(payload)
                self.ready.set()
            elif kind == "outcome":
                self.outcome = payload
            elif kind == "crash":
                self.crash = payload
        code = self.process.wait()
        if self.outcome is None and self.crash is None:
            self.crash = f"the node's launcher process exited with code {code} without a result"
        self.ready.set()
        self.finished.set()

    def drain(self) -> tuple[list[Any], list[str], NodeOutcome | None, str | None]:
        """What happened since the last call; the outcome (or a crash) once the node is done."""
        events = [self.events.popleft() for _ in range(len(self.events))]
        notes = [self.notes.popleft() for _ in range(len(self.notes))]
        if self.finished.is_set() and not self.events:
            return events, notes, self.outcome, self.crash
        return events, notes, None, None

    def stop(self) -> None:
        """Stop the ranks (the launcher process stops its workers, then reports)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def kill(self, grace: float = 5.0) -> None:
        """Nothing of this node left running: stop, then kill the launcher (its workers follow)."""
        if self.process is None:
            return
        self.stop()
        deadline = time.monotonic() + grace
        while self.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def pid(self) -> int:
        return os.getpid()


def _clean_env() -> dict[str, str]:
    """The actor's environment for the node launcher, without Ray's own worker variables that
    would make a process there believe it is a Ray worker."""
    return {k: v for k, v in os.environ.items() if not k.startswith("RAY_RAYLET_PID")}
