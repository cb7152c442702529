"""The kernel's side of a %%ranks group: N rank processes kept alive between cells.

- Start: resolved like a launch (resolution/, entry "ranks": config, processes, start method) and
  planned by launch/planning.py (a rendezvous store hosted here); each rank runs `serve_rank`; start() returns once every rank's process group
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

import contextlib
import selectors
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, cast

from ..launch.cell.checkpoint_view import CheckpointBoard
from ..launch.events import tick
from ..launch.result import RunRecord
from ..launch.supervise.forksafety import HelperProcesses, release_openmp_threads
from ..launch.supervise.inbox import Inbox
from ..launch.supervise.processes import Worker, kill_and_reap, signal_group, signal_process, stop_group
from ..launch.worker import channel
from ..launch.worker.standby import LaunchState
from ..records.names import RUN_DIR_ENV
from ..system.fork_lock import fork_lock
from ..system.private_files import make_private_dir
from . import protocol
from .rank_process import serve_rank

GRACE_SECONDS = 3.0  # for a rank to answer an interrupt, or to exit when stopped
POLL_SECONDS = 0.05
RESEND_SIGINT_SECONDS = 0.5  # a SIGINT that landed between commands was ignored: send it again
TAIL_LINES = 20  # of a dead rank's output, shown when it broke the group


@dataclass
class RankProcess(Worker):
    """One rank: a launch's Worker (process, output and message pipes, what was read) plus the
    command pipe and what the kernel knows about the rank between commands."""

    cmd: Connection | None = None
    status: str = "starting"  # starting, idle, busy, stuck, failed, dead
    info: dict[str, Any] = field(default_factory=dict)  # pid, device, backend (from READY)
    waiting_for: int | None = None  # the command id this rank owes an answer to
    reply: dict[str, Any] | None = None
    exitcode: int | None = None

    @property
    def alive(self) -> bool:
        return self.status != "dead"

    def tail(self) -> str:
        return "\n".join(list(self.lines)[-TAIL_LINES:])


class _RankInbox(Inbox):
    """The launch's Inbox (output lines, metrics) plus the ranks' own messages: READY and REPLY."""

    def read_message(self, worker: Worker) -> bool:
        try:
            kind, payload = channel.decode(worker.msg.recv_bytes())
        except (EOFError, OSError):
            return False
        rank = worker
        assert isinstance(rank, RankProcess)
        if kind == protocol.READY:
            rank.info, rank.status, rank.waiting_for = payload, "idle", None
        elif kind == protocol.REPLY:
            if payload["id"] == rank.waiting_for:
                rank.reply, rank.waiting_for = payload, None
                rank.status = "idle" if payload["id"] != -1 else "failed"
            elif rank.status == "stuck":
                rank.status = "idle"  # a late answer: the rank is free again (the group stays broken)
        elif kind == channel.METRIC:
            self._take_metric(rank, payload)
        elif kind in (channel.CHECKPOINT, channel.CHECKPOINT_WRITING):
            self.take_checkpoint(rank, kind, payload)  # also written between cells (async_save)
        elif kind == channel.STARTED:
            rank.started = True
        else:
            self.relayed(rank, kind, payload)
        return True


class RankGroup:
    """Start, command, interrupt and stop a group of rank processes (see the module docstring)."""

    def __init__(self, plan: Any, observers: Sequence[Callable[[Any], None]] = ()) -> None:
        self.plan = plan
        self.observers = list(observers)
        self.ranks: list[RankProcess] = []
        self.selector = selectors.DefaultSelector()
        self.helpers: HelperProcesses | None = None
        self.broken: str | None = None  # why cells cannot run any more (None: usable)
        self.record = RunRecord()  # its metrics: one row per accelerator.log() in any rank
        self.checkpoints = CheckpointBoard()  # a save being written, the last complete one (status())
        self.inbox = _RankInbox(self.record, self._emit, lambda: None, lambda rank: False)
        self.started_at = time.time()
        self._next_id = 0
        self._closed = False
        self.run_dir = make_private_dir()  # what the ranks write for the group (0700); removed by stop()

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
        text = error["traceback"] if error else rank.tail()
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
            spec.env[RUN_DIR_ENV] = self.run_dir
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
                rank = RankProcess(spec.rank, process, out_r, err_r, msg_r, cmd=cmd_w)
                self.ranks.append(rank)
                ends = [out_w, err_w, msg_w, cmd_r]  # the rest belongs to the rank now
                with fork_lock():  # not while another thread warms up: system/fork_lock.py
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
                    cast(Connection, rank.cmd).send_bytes(blob)  # given when the rank started
            self._wait(targets, until=lambda r: r.reply is not None)
        except KeyboardInterrupt:
            self._interrupt(targets)
            self._collect_output(targets)
            raise
        self._collect_output(targets)
        return {r.rank: r.reply for r in targets}

    def _collect_output(self, targets: list[RankProcess]) -> None:
        """Everything a rank printed during the command, in this cell: a rank flushes its streams before
        it answers, so what is in its pipes now belongs here, and a line left without its newline (a
        print cut by the stop) ends with the cell instead of starting the next cell's first line."""
        for rank in targets:
            if not rank.exited:
                self.inbox.drain(rank)
        for observer in tuple(self.observers):
            finish = getattr(observer, "finish", None)  # the cell printer: this cell's output is complete
            if finish is not None:
                finish()

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
            signal_process(rank, signal.SIGINT)
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
                        signal_process(rank, signal.SIGINT)
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
                if not self.inbox.read_message(rank):
                    self._unregister(key.fd)
            elif what == "exit":
                self._on_exit(rank, key.fd)
            elif not self.inbox.read_output(rank, what):
                self._unregister(key.fd)
        tick(self.observers)

    def _on_exit(self, rank: RankProcess, fd: int) -> None:
        self._unregister(fd)
        rank.process.join(5)
        self.inbox.drain(rank)
        rank.exited, rank.status, rank.exitcode = True, "dead", rank.process.exitcode
        signal_group(rank, signal.SIGKILL)  # what it started (DataLoader workers, subprocesses) ends too
        if self.broken is None and not self._closed:
            self.broken = f"rank {rank.rank} exited ({describe_exit(rank.exitcode)})"

    def _unregister(self, fd: int) -> None:
        try:
            self.selector.unregister(fd)
        except (KeyError, ValueError):
            pass

    def catch_up(self) -> None:
        """Read what the ranks sent while no command ran (a background save's progress, its end)."""
        if self._closed:
            return
        for _ in range(1000):  # bounded: a rank that keeps sending cannot hold the caller here
            if not self.selector.select(0):
                return
            self.pump(0)

    def _emit(self, event: Any) -> None:
        self.checkpoints.apply(event)
        for observer in tuple(self.observers):
            try:
                observer(event)
            except Exception:  # noqa: BLE001 - a printer must never break the group
                self.observers.remove(observer)

    # -------------------------------------------------------------------- stop
    def stop(self) -> None:
        """End every rank (EXIT, then the launcher's stop signal, then SIGKILL), close every pipe, release
        the port."""
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
            if not (rank.alive and rank.launched):
                continue
            if rank.status == "idle":
                try:
                    cast(Connection, rank.cmd).send_bytes(protocol.encode(protocol.EXIT, 0, None))
                except OSError:
                    pass
            else:
                stop_group(rank)  # not SIGTERM alone: with an Accelerator that asks for a graceful stop
        deadline = time.monotonic() + GRACE_SECONDS
        while any(r.alive and r.launched for r in self.ranks) and time.monotonic() < deadline:
            self.pump(POLL_SECONDS)

    def _end_everything(self) -> None:
        for rank in self.ranks:
            kill_and_reap(rank)  # the rank's process group, reaped within a bound; its pipes closed
            rank.status = "dead"
            cast(Connection, rank.cmd).close()
        self.selector.close()
        shutil.rmtree(self.run_dir, ignore_errors=True)
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


def describe_exit(code: int | None) -> str:
    if code is None:
        return "exit status unknown"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
