"""The kernel's side of a %%ranks group: N rank processes kept alive between cells.

- Start: planned like a launch (launch/planning.py: config, processes, start method, a rendezvous
  store hosted here); each rank runs `serve_rank`; start() returns once every rank's process group
  is up, or raises with the first rank's reason and leaves nothing behind.
- A command goes to the chosen ranks; while they work, every rank's output streams to the
  observers (the cell printer) as launch events; each chosen rank answers once.
- The stop button (KeyboardInterrupt here) becomes SIGINT to the busy ranks, which raises
  KeyboardInterrupt inside the cell's code there. A rank that has not answered after a grace period
  is stuck (in practice: inside a collective whose peers left it, where Python signals wait); it
  and a rank that died make the group *broken*: its process group cannot be trusted any more.
- stop() ends everything: no process, pipe or port is left.
"""

from __future__ import annotations

import collections
import contextlib
import os
import selectors
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from ..launch.events import MetricLogged, OutputLine
from ..launch.forksafety import HelperProcesses, release_openmp_threads
from ..launch.standby import LaunchState
from . import protocol
from .rank_process import serve_rank

GRACE_SECONDS = 3.0  # for a rank to answer an interrupt, or to exit when stopped
POLL_SECONDS = 0.05
RESEND_SIGINT_SECONDS = 0.5  # a SIGINT that landed between commands was ignored: send it again
TAIL_LINES = 20


@dataclass
class RankProcess:
    """One rank: its process, its pipes, and what the kernel knows about it."""

    rank: int
    process: Any
    out: Connection
    err: Connection
    msg: Connection
    cmd: Connection
    partial: dict[str, bytes] = field(default_factory=lambda: {"stdout": b"", "stderr": b""})
    lines: collections.deque = field(default_factory=lambda: collections.deque(maxlen=TAIL_LINES))
    status: str = "starting"  # starting, idle, busy, stuck, dead
    info: dict[str, Any] = field(default_factory=dict)  # pid, device, backend (from READY)
    waiting_for: int | None = None  # the command id this rank owes an answer to
    reply: dict[str, Any] | None = None
    exitcode: int | None = None

    @property
    def alive(self) -> bool:
        return self.status != "dead"


class RankGroup:
    """Start, command, interrupt and stop a group of rank processes (see the module docstring)."""

    def __init__(self, plan: Any, observers: Sequence[Callable[[Any], None]] = ()) -> None:
        self.plan = plan
        self.observers = list(observers)
        self.ranks: list[RankProcess] = []
        self.selector = selectors.DefaultSelector()
        self.helpers: HelperProcesses | None = None
        self.broken: str | None = None  # why cells cannot run any more (None: usable)
        self.metrics: list[dict[str, Any]] = []
        self.started_at = time.time()
        self._next_id = 0
        self._closed = False

    # ------------------------------------------------------------------ start
    def start(self) -> None:
        """Start every rank and wait until each says its process group is up."""
        try:
            self._spawn_all()
            targets = list(self.ranks)
            for rank in targets:
                rank.waiting_for = -1  # a startup failure is reported as the answer to command -1
            self._wait(targets, until=lambda r: r.status == "idle" or r.reply is not None)
        except BaseException:
            self.stop()
            raise
        failed = sorted((r for r in self.ranks if r.status != "idle"), key=lambda r: r.status == "stuck")
        if failed:
            reason = self.startup_failure(failed[0])
            self.stop()
            raise reason

    def startup_failure(self, rank: RankProcess) -> BaseException:
        from .outcome import RanksStartError

        error = (rank.reply or {}).get("error")
        text = error["traceback"] if error else "\n".join(rank.lines)
        return RanksStartError(rank.rank, rank.exitcode, text)

    def _spawn_all(self) -> None:
        ctx = self.plan.context
        if self.plan.start_method == "fork":
            release_openmp_threads()
        elif self.plan.pool is None:
            self.helpers = HelperProcesses()
        else:
            self.plan.pool.launch_begins()  # the ranks are the server's children: keep it while they live
        state = LaunchState() if self.plan.pool is not None else None
        for spec in self.plan.specs:
            ends: list[Connection] = []
            try:
                for _ in range(3):
                    ends.extend(ctx.Pipe(duplex=False))
                cmd_r, cmd_w = ctx.Pipe(duplex=False)
                ends += [cmd_r, cmd_w]
                out_r, out_w, err_r, err_w, msg_r, msg_w = ends[:6]
                process = ctx.Process(
                    target=serve_rank,
                    args=(spec, out_w, err_w, msg_w, cmd_r, state),
                    name=f"notebook_launcher-ranks{spec.rank}",
                    daemon=False,
                )
                rank = RankProcess(spec.rank, process, out_r, err_r, msg_r, cmd_w)
                self.ranks.append(rank)
                ends = [out_w, err_w, msg_w, cmd_r]  # the rest belongs to the rank now
                process.start()
            finally:
                for end in ends:
                    end.close()
            for conn, what in ((rank.out, "stdout"), (rank.err, "stderr"), (rank.msg, "msg")):
                self.selector.register(conn.fileno(), selectors.EVENT_READ, (rank, what))
            self.selector.register(process.sentinel, selectors.EVENT_READ, (rank, "exit"))

    # ---------------------------------------------------------------- commands
    def request(self, command: str, payload: Any, ranks: Sequence[int]) -> dict[int, dict[str, Any] | None]:
        """Send one command to `ranks` and wait for each one's answer (None: the rank died)."""
        self._next_id += 1
        blob = protocol.encode(command, self._next_id, payload)
        targets = [self.by_rank(r) for r in ranks]
        try:
            with _interrupts_deferred():  # a command cut in half would garble the rank's pipe for good
                for rank in targets:
                    rank.reply, rank.waiting_for, rank.status = None, self._next_id, "busy"
                    rank.cmd.send_bytes(blob)
            self._wait(targets, until=lambda r: r.reply is not None)
        except KeyboardInterrupt:
            self._interrupt(targets)
            raise
        return {r.rank: r.reply for r in targets}

    def by_rank(self, rank: int) -> RankProcess:
        return next(r for r in self.ranks if r.rank == rank)

    def _wait(self, targets: list[RankProcess], until: Callable[[RankProcess], bool]) -> None:
        """Pump every pipe until each target is done; after a death, wait GRACE_SECONDS for the rest."""
        died_at: float | None = None
        while True:
            pending = [r for r in targets if r.alive and not until(r)]
            if not pending:
                return
            if any(not r.alive for r in self.ranks):
                died_at = died_at or time.monotonic()
                if time.monotonic() - died_at > GRACE_SECONDS:
                    self._mark_stuck(pending, "did not answer after another rank died")
                    return
            self.pump(POLL_SECONDS)

    def _interrupt(self, targets: list[RankProcess]) -> None:
        """SIGINT the busy ranks until they answer; those that cannot be interrupted are stuck."""
        began = last_signal = time.monotonic()
        busy = [r for r in targets if r.status == "busy"]
        for rank in busy:
            _signal(rank, signal.SIGINT)
        try:
            while True:
                busy = [r for r in busy if r.status == "busy"]
                if not busy:
                    return
                now = time.monotonic()
                if now - began > GRACE_SECONDS:
                    break
                if now - last_signal > RESEND_SIGINT_SECONDS:
                    for rank in busy:
                        _signal(rank, signal.SIGINT)
                    last_signal = now
                self.pump(POLL_SECONDS)
        except KeyboardInterrupt:
            pass  # pressed again: stop waiting for them
        self._mark_stuck(busy, "did not stop when interrupted")

    def _mark_stuck(self, ranks: list[RankProcess], why: str) -> None:
        for rank in ranks:
            rank.status = "stuck"
        if ranks and self.broken is None:
            which = ", ".join(str(r.rank) for r in ranks)
            self.broken = (
                f"rank {which} {why}: most likely it is blocked inside a torch.distributed call (a collective "
                "waits for every rank of the group, and Python cannot interrupt that wait)"
            )

    # ------------------------------------------------------------------- pipes
    def pump(self, timeout: float) -> None:
        """Read whatever the ranks sent within `timeout`: output, answers, exits."""
        for key, _ in self.selector.select(timeout):
            rank, what = key.data
            if what == "msg":
                self._read_message(rank, key.fd)
            elif what == "exit":
                self._on_exit(rank, key.fd)
            else:
                self._read_output(rank, what, key.fd)

    def _read_output(self, rank: RankProcess, stream: str, fd: int) -> None:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            chunk = b""
        if not chunk:
            self._unregister(fd)
            self._emit_lines(rank, stream, rank.partial[stream], final=True)
            rank.partial[stream] = b""
            return
        rank.partial[stream] = self._emit_lines(rank, stream, rank.partial[stream] + chunk)

    def _emit_lines(self, rank: RankProcess, stream: str, data: bytes, final: bool = False) -> bytes:
        *complete, rest = data.split(b"\n")
        if final and rest:
            complete, rest = [*complete, rest], b""
        for raw in complete:
            text = raw.decode("utf-8", errors="replace")
            rank.lines.append(text)
            self._emit(OutputLine(rank.rank, stream, text))  # type: ignore[arg-type]
        return rest

    def _read_message(self, rank: RankProcess, fd: int) -> bool:
        """Handle one message; False once the pipe is closed."""
        try:
            kind, payload = protocol.decode(rank.msg.recv_bytes())
        except (EOFError, OSError):
            self._unregister(fd)
            return False
        if kind == protocol.READY:
            rank.info, rank.status, rank.waiting_for = payload, "idle", None
        elif kind == protocol.REPLY:
            if payload["id"] == rank.waiting_for:
                rank.reply, rank.waiting_for = payload, None
                rank.status = "idle" if payload["id"] != -1 else "failed"
            elif rank.status == "stuck":
                rank.status = "idle"  # a late answer: the rank is free again (the group stays broken)
        elif kind == "metric":
            row = {"rank": rank.rank, "step": payload.get("step"), "time": payload["time"]}
            self.metrics.append({**row, **payload["values"]})
            self._emit(MetricLogged(rank.rank, payload.get("step"), dict(payload["values"]), payload["time"]))
        return True

    def _on_exit(self, rank: RankProcess, fd: int) -> None:
        self._unregister(fd)
        rank.process.join(5)
        self._drain(rank)
        rank.exitcode = rank.process.exitcode
        rank.status = "dead"
        if self.broken is None and not self._closed:
            self.broken = f"rank {rank.rank} exited ({describe_exit(rank.exitcode)})"

    def _drain(self, rank: RankProcess) -> None:
        """Read what an exited rank left in its pipes (without waiting for anything it started)."""
        for stream, conn in (("stdout", rank.out), ("stderr", rank.err)):
            while not conn.closed and conn.poll(0):
                try:
                    chunk = os.read(conn.fileno(), 65536)
                except OSError:
                    break
                if not chunk:
                    break
                rank.partial[stream] = self._emit_lines(rank, stream, rank.partial[stream] + chunk)
            self._emit_lines(rank, stream, rank.partial[stream], final=True)
            rank.partial[stream] = b""
        while not rank.msg.closed and rank.msg.poll(0):
            if not self._read_message(rank, rank.msg.fileno()):
                break

    def _unregister(self, fd: int) -> None:
        try:
            self.selector.unregister(fd)
        except (KeyError, ValueError):
            pass

    def _emit(self, event: Any) -> None:
        for observer in tuple(self.observers):
            try:
                observer(event)
            except Exception:  # noqa: BLE001 - a printer must never break the group
                self.observers.remove(observer)

    # -------------------------------------------------------------------- stop
    def stop(self) -> None:
        """End every rank (EXIT, then SIGTERM, then SIGKILL), close every pipe, release the port."""
        if self._closed:
            return
        self._closed = True
        try:
            self._ask_to_exit()
        except KeyboardInterrupt:
            pass
        while True:
            try:
                self._end_everything()
                return
            except KeyboardInterrupt:  # pressed during the last step: it is idempotent, run it again
                continue

    def _ask_to_exit(self) -> None:
        for rank in self.ranks:
            if rank.alive and rank.status == "idle" and rank.process._popen is not None:
                try:
                    rank.cmd.send_bytes(protocol.encode(protocol.EXIT, 0, None))
                except OSError:
                    pass
            elif rank.alive and rank.process._popen is not None:
                _signal(rank, signal.SIGTERM)
        deadline = time.monotonic() + GRACE_SECONDS
        while any(r.alive and r.process._popen is not None for r in self.ranks):
            if time.monotonic() > deadline:
                return
            self.pump(POLL_SECONDS)

    def _end_everything(self) -> None:
        for rank in self.ranks:
            if rank.process._popen is not None and rank.process.exitcode is None:
                _signal(rank, signal.SIGKILL)
                rank.process.join(5)
            if rank.process._popen is not None and rank.process.exitcode is not None:
                rank.process.close()
            rank.status = "dead"
            for conn in (rank.out, rank.err, rank.msg, rank.cmd):
                conn.close()
        self.selector.close()
        self.plan.store = None  # closes the rendezvous port
        if self.helpers is not None:
            self.helpers.stop_new()
        if self.plan.pool is not None:
            self.plan.pool.launch_ends(0)


@contextlib.contextmanager
def _interrupts_deferred() -> Iterator[None]:
    """Ctrl-C / the stop button while commands are being written: raise it once they are written.

    (Masking the signal would not do: any thread of the kernel can take it, and Python still runs
    the handler in this one.) The previous handler is back when the block ends.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread receives KeyboardInterrupt
        return
    pressed: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: pressed.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if pressed:
        raise KeyboardInterrupt


def _signal(rank: RankProcess, signum: int) -> None:
    try:
        if rank.process.pid is not None:
            os.kill(rank.process.pid, signum)
    except (ProcessLookupError, OSError, ValueError):
        pass


def describe_exit(code: int | None) -> str:
    if code is None:
        return "exit status unknown"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
