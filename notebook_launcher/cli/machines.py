"""The machines of a CLI launch tell each other how they stand, and none waits for a gone one.

torchrun's agent ends a run with `_exit_barrier`: every machine's launcher waits in the rendezvous
store until all have finished their workers. A machine whose peer launcher is gone (exited,
killed, crashed) waits there for its whole timeout, and then reports success. Here each launcher
publishes its state to the store once a second (a heartbeat with a sequence number, so clocks need
not agree), and the exit is our own bounded wait in torch's place (BoundedExitAgent):

- a peer whose heartbeat has not changed for GONE_AFTER_SECONDS, or that said it exited without
  reaching the exit, ends this machine at once with MachinesMissing: which machine, its host and
  pid, and its last known state; the launcher prints it and exits with status 1;
- a peer that is alive but does not reach the exit ends it after torch's exit_barrier_timeout (300 s);
- the machine that hosts the store waits until every peer has left the exit (each needs the store
  until then), bounded the same way.

So a machine whose peers are gone ends at most GONE_AFTER_SECONDS + 1 s after their last report.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any, cast

from ..config import LaunchConfig
from ..records.names import ALL_INTERFACES, LOOPBACK
from ..system.store import store_bind_address

GONE_AFTER_SECONDS = 15.0
BEAT_SECONDS = 1.0
POLL_SECONDS = 0.25
PREFIX = "notebook_launcher/machines/"

_WORKER_STATES = {
    "INIT": "its workers were starting",
    "HEALTHY": "its workers were running",
    "UNHEALTHY": "its workers were failing",
    "STOPPED": "its workers had been stopped",
    "SUCCEEDED": "its workers had finished",
    "FAILED": "its workers had failed",
    "UNKNOWN": "its workers' state was unknown",
}
_PHASES = {
    "running": "",
    "exit": ", and it was waiting at the exit for the other machines",
    "left": ", and it had left the exit",
}
_ORDER = {"running": 0, "exit": 1, "left": 2}


class MachinesMissing(Exception):
    """This machine's workers are done, but a peer machine is gone or never reached the exit."""


class MachineBoard:
    """This launcher's heartbeat on the store, and the peers' as last seen (monotonic times)."""

    def __init__(self, host: str, port: int, machine_rank: int) -> None:
        self.host, self.port, self.machine_rank = host, port, machine_rank
        self.group_rank: int | None = None
        self.world = 0
        self.worker_state = "INIT"
        self.phase = "running"
        self.exited = False
        self._seq = 0
        self._seen: dict[int, tuple[dict[str, Any], float]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._store: Any = None
        self._thread = threading.Thread(
            target=self._beat_loop, name="notebook_launcher-machines", daemon=True
        )

    # ------------------------------------------------------------- this side
    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Say once more how this launcher stands, now exiting, and stop beating."""
        self.exited = True
        self._stop.set()
        self._thread.join(timeout=5)
        if self._store is not None:
            self.beat()

    def _client(self) -> Any:
        if self._store is None:
            from torch.distributed import TCPStore

            self._store = TCPStore(
                self.host, self.port, is_master=False, timeout=timedelta(seconds=10), wait_for_workers=False
            )
        return self._store

    def beat(self) -> None:
        """Publish this machine's state and read the peers'; a store that does not answer is skipped."""
        if self.group_rank is None:
            return
        with self._lock:
            self._seq += 1
            mine = {
                "seq": self._seq,
                "state": self.worker_state,
                "phase": self.phase,
                "exited": self.exited,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "machine_rank": self.machine_rank,
            }
            try:
                store = self._client()
                store.set(f"{PREFIX}{self.group_rank}", json.dumps(mine))
                for peer in range(self.world):
                    if peer != self.group_rank and store.check([f"{PREFIX}{peer}"]):
                        self._take(peer, json.loads(store.get(f"{PREFIX}{peer}")))
            except Exception:  # noqa: BLE001 - the store's host may be gone; the exit says so
                pass

    def _take(self, peer: int, report: dict[str, Any]) -> None:
        old = self._seen.get(peer)
        if old is None or old[0]["seq"] != report["seq"]:
            self._seen[peer] = (report, time.monotonic())

    def _beat_loop(self) -> None:
        while not self._stop.wait(BEAT_SECONDS):
            self.beat()

    # ------------------------------------------------------------- the peers
    def missing(self, arrived_since: float, waiting_for: str) -> list[str]:
        """One line per peer that has not reached `waiting_for` ('exit' or 'left') and is gone: its
        launcher said it exited, or it has been silent for GONE_AFTER_SECONDS (never seen since
        `arrived_since` counts as silent since then)."""
        now = time.monotonic()
        lines = []
        with self._lock:
            for peer in range(self.world):
                if peer == self.group_rank:
                    continue
                report, changed = self._seen.get(peer, (None, arrived_since))
                if report is not None and _ORDER[report["phase"]] >= _ORDER[waiting_for]:
                    continue
                if (report is not None and report["exited"]) or now - changed > GONE_AFTER_SECONDS:
                    lines.append(describe(peer, report, now - changed))
        return lines

    def not_arrived(self, waiting_for: str) -> list[str]:
        now = time.monotonic()
        with self._lock:
            return [
                describe(peer, report, now - changed)
                for peer, (report, changed) in sorted(self._seen.items())
                if _ORDER[report["phase"]] < _ORDER[waiting_for]
            ] or ["a machine that never reported to the store"]


def describe(peer: int, report: dict[str, Any] | None, silent_for: float) -> str:
    """'machine 1 (host h, launcher pid 12, --machine_rank 1): last heard 16 s ago; its workers had finished'"""
    if report is None:
        return f"machine {peer}: never reported to the rendezvous store (waited {silent_for:.0f} s)"
    state = _WORKER_STATES.get(report["state"], f"its workers were {report['state']}")
    how = "its launcher exited" if report["exited"] else f"last heard {silent_for:.0f} s ago"
    return (
        f"machine {peer} (host {report['host']}, launcher pid {report['pid']}, --machine_rank "
        f"{report['machine_rank']}): {how}; last known state: {state}{_PHASES.get(report['phase'], '')}"
    )


def bounded_exit(agent: Any, board: MachineBoard) -> None:
    """Our exit barrier in place of torch's: wait for every machine at the exit, never for a gone one."""
    store = agent._store
    world = agent._worker_group.group_world_size
    board.phase = "exit"
    board.beat()
    started = time.monotonic()
    try:
        store.add(f"{PREFIX}arrived", 1)
        _wait_for(lambda: store.add(f"{PREFIX}arrived", 0) >= world, board, started, "exit", agent)
        board.phase = "left"
        store.add(f"{PREFIX}left", 1)
        board.beat()
        if board.machine_rank == 0:  # the store's host: the others need it until they leave
            _wait_for(lambda: store.add(f"{PREFIX}left", 0) >= world, board, started, "left", agent)
    except MachinesMissing:
        raise
    except Exception as exc:  # noqa: BLE001 - the store (machine 0's launcher) is gone
        raise MachinesMissing(
            "the rendezvous store on machine 0 no longer answers, so machine 0's launcher is gone "
            f"({type(exc).__name__}: {exc})."
        ) from None


def _wait_for(done: Any, board: MachineBoard, started: float, phase: str, agent: Any) -> None:
    limit = float(agent._exit_barrier_timeout)
    while not done():
        gone = board.missing(started, phase)
        if gone:
            raise MachinesMissing(
                "this machine's workers have finished, but "
                + ("these other machines are gone:\n  " if len(gone) > 1 else "another machine is gone: ")
                + "\n  ".join(gone)
                + f"\n(a machine is taken as gone after {GONE_AFTER_SECONDS:g} s without a report)"
            )
        if time.monotonic() - started > limit:
            raise MachinesMissing(
                f"this machine's workers have finished, but after {limit:g} s at the exit these machines are still "
                "running and have not reached it:\n  " + "\n  ".join(board.not_arrived(phase))
            )
        time.sleep(POLL_SECONDS)


def bounded_exit_agent(host: str, port: int, machine_rank: int) -> type:
    """torch's LocalElasticAgent with the heartbeat and our bounded exit (a class made on demand,
    so importing this module imports no torch)."""
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    class BoundedExitAgent(LocalElasticAgent):
        def run(self, role: str = "default") -> Any:
            self._board = MachineBoard(host, port, machine_rank)
            self._board.start()
            try:
                return super().run(role)
            finally:
                self._board.worker_state = self._worker_group.state.name
                self._board.stop()

        def _monitor_workers(self, worker_group: Any) -> Any:
            result = super()._monitor_workers(worker_group)
            board = self._board
            board.group_rank, board.world = worker_group.group_rank, worker_group.group_world_size
            board.worker_state = result.state.name
            return result

        def _exit_barrier(self) -> None:
            self._board.worker_state = self._worker_group.state.name
            bounded_exit(self, self._board)

    return BoundedExitAgent


@contextlib.contextmanager
def bounded_exit_installed(config: LaunchConfig) -> Iterator[None]:
    """Over several machines, torchrun's agent with our bounded exit (cli/machines.py) for this run."""
    if config.num_machines == 1:
        yield
        return
    from torch.distributed.launcher import api

    torchs = api.LocalElasticAgent
    host = str(config.main_process_ip)
    if config.machine_rank == 0 and store_bind_address(host, config.num_machines) == ALL_INTERFACES:
        host = LOOPBACK  # the store listens on every interface; its own address may not route back here
    port = cast(int, config.main_process_port)  # chosen before the agent starts
    patched: Any = api  # the module whose class is swapped (mypy forbids assigning to a class)
    patched.LocalElasticAgent = bounded_exit_agent(host, int(port), config.machine_rank)
    try:
        yield
    finally:
        patched.LocalElasticAgent = torchs
