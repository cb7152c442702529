"""The warm pool: workers for launches that cannot fork the kernel, ready before the launch.

A kernel that touched CUDA cannot fork its workers; spawning fresh interpreters costs ~1.5 s per
launch (each imports torch). Instead, `start_method="forkserver"` (what "auto" picks in such a
kernel) uses Python's forkserver, started once with torch, torch.distributed, DDP's modules and our
runtime preloaded, and keeps a few workers already forked from it, waiting (worker/standby.py). A launch
hands each of them its spec and the kernel's current state, and they run it as any worker does.

- Workers are used once: each runs one launch and exits, so nothing a launch did leaks into the
  next. What a waiting worker took from the moment it was forked — environment, working
  directory, sys.path, random generators — is replaced by the launch's (standby.LaunchState);
  config, threads and the env contract travel in its spec, as in every launch.
- A worker that has sent its result and closed its message pipe has nothing left to say: the
  launch returns, and the pool reaps it (and anything it started) while it exits — tearing down
  a process with torch loaded takes tens of milliseconds, which the caller does not wait for.
- What stays alive between launches, deliberately: one forkserver, its resource tracker, and at
  most as many waiting workers as the largest recent launch had (MAX_WAITING at most), plus the
  last launch's workers until they are reaped. They hold no GPU and no port (each launch hosts
  its own rendezvous store).
- Released by `release_warm_pool()`, after IDLE_SECONDS without a launch, and at interpreter exit
  (kernel shutdown). If the kernel is killed, the forkserver sees its pipe close and exits at once
  (server_exit.py), and the waiting workers die with it (they ask Linux for that, as every worker
  does).
"""

from __future__ import annotations

import atexit
import signal
import sys
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

IDLE_SECONDS = 600.0
MAX_WAITING = 16
PRELOAD = ("notebook_launcher.launch.warm.preload",)  # torch, our runtime, a first LaunchConfig
SERVER_EXIT = "notebook_launcher.launch.warm.server_exit"  # preloaded last: the server ends at once


@dataclass
class Waiting:
    """A worker forked ahead of a launch: its process and the kernel's ends of its pipes."""

    process: Any
    out: Connection
    err: Connection
    msg: Connection
    assign: Connection


class WarmPool:
    """One per kernel (warm_pool()); every method may be called from the keeper's thread.

    One keeper thread (started with the pool's first launch) forks the next launch's workers and
    releases the pool when it has been idle IDLE_SECONDS: a launch that ends only records what it
    wants and wakes it, instead of starting a timer thread and a refill thread each time (two
    thread starts cost the return path milliseconds on a busy machine).
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._waiting: list[Waiting] = []
        # launches (and rank groups) in progress: never release under them, their workers are the
        # server's children and would die with it
        self._active = 0
        self._generation = 0  # bumped by release(): a refill scheduled before it forks nothing
        self._wake = threading.Condition(self._lock)
        self._keeper: threading.Thread | None = None
        self._idle_deadline: float | None = None  # monotonic time the idle release is due
        self._refill_wanted: tuple[int, int] | None = None  # (size, generation) for the keeper
        self._refilling = False  # the keeper is forking waiting workers right now
        self._exiting: list[Any] = []  # workers of the last launch, done and exiting: reaped here
        self._owned_helpers: list[Any] = []
        self.context: Any = None

    # ------------------------------------------------------------------ server
    def ensure_server(self) -> Any:
        """The forkserver context, its server running with our modules preloaded."""
        with self._lock:
            if self.context is not None and self._helpers_alive():
                return self.context
            if self.context is None:
                import multiprocessing as mp  # torch's is this one (planning.plan_started_by)

                self.context = mp.get_context("forkserver")
            from multiprocessing import forkserver, resource_tracker

            helpers = (resource_tracker._resource_tracker, forkserver._forkserver)
            before = [_running(h) for h in helpers]
            if not before[1]:
                self.context.set_forkserver_preload([*PRELOAD, *_main_module(), SERVER_EXIT])
            forkserver.ensure_running()
            self._owned_helpers += [
                h for h, was in zip(helpers, before, strict=True) if not was and _running(h)
            ]
            return self.context

    def _helpers_alive(self) -> bool:
        """Whether the forkserver and its resource tracker this pool relies on are both alive, read
        from /proc without a syscall to either: forkserver.ensure_running probes the tracker with a
        write to its pipe, which on a busy machine cost each launch milliseconds (a context switch).
        Anything unclear (no /proc, a pid gone or a zombie) answers False: the full check runs."""
        from multiprocessing import forkserver, resource_tracker

        pids = (
            getattr(resource_tracker._resource_tracker, "_pid", None),
            getattr(forkserver._forkserver, "_forkserver_pid", None),
        )
        for pid in pids:
            if pid is None:
                return False
            try:
                with open(f"/proc/{pid}/stat", "rb") as stat:
                    state = stat.read().rsplit(b")", 1)[1].split()[0]
            except (OSError, IndexError):
                return False
            if state in (b"Z", b"X"):
                return False
        return True

    # --------------------------------------------------------------- launches
    def launch_begins(self) -> None:
        self.settle()  # a refill still forking the waiting workers: this launch takes them
        with self._lock:
            self._active += 1
            self._idle_deadline = None

    def start_worker(self, spec: Any, state: Any) -> tuple[Any, Connection, Connection, Connection]:
        """A worker running `spec` with the kernel's `state`: a waiting one, or a new one."""
        import pickle

        with self._lock:
            worker = self._waiting.pop(0) if self._waiting else self._fork_one()
        try:
            worker.assign.send_bytes(pickle.dumps((spec, state), protocol=pickle.HIGHEST_PROTOCOL))
        except OSError:  # it died while waiting (e.g. killed by hand): use a new one
            _discard(worker)
            worker = self._fork_one()
            worker.assign.send_bytes(pickle.dumps((spec, state), protocol=pickle.HIGHEST_PROTOCOL))
        finally:
            worker.assign.close()
        return worker.process, worker.out, worker.err, worker.msg

    def launch_ends(self, size: int) -> None:
        """Fork the next launch's workers (they wait, ready) in the background, so the launch returns
        without waiting for them; arm the idle release."""
        with self._lock:
            self._active -= 1
            self._idle_deadline = time.monotonic() + IDLE_SECONDS
            if size or self._exiting:
                self._refill_wanted = (size, self._generation)
            self._ensure_keeper()
            self._wake.notify_all()

    def reap_later(self, worker: Any) -> None:
        """A launch's worker that sent everything and is exiting: reaped after the launch returns."""
        with self._lock:
            self._exiting.append(worker)

    def _reap_exiting(self) -> None:
        exiting, self._exiting = self._exiting, []
        for worker in exiting:
            _reap(worker)

    def _ensure_keeper(self) -> None:
        if self._keeper is None or not self._keeper.is_alive():
            self._keeper = threading.Thread(
                target=self._keep, name="notebook_launcher-warm-pool", daemon=True
            )
            self._keeper.start()

    def _keep(self) -> None:
        """The keeper's loop: refill when a launch ended, release when idle long enough."""
        with self._lock:
            while True:
                if self._refill_wanted is not None:
                    size, generation = self._refill_wanted
                    self._refill_wanted = None
                    self._refilling = True
                    try:
                        self._refill(size, generation)
                    finally:
                        self._refilling = False
                        self._wake.notify_all()
                    continue
                deadline = self._idle_deadline
                if deadline is not None and time.monotonic() >= deadline:
                    self._idle_deadline = None
                    self.release()
                    continue
                self._wake.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def _refill(self, size: int, generation: int) -> None:
        with self._lock:  # the next launch's start_worker waits for this: it gets these workers
            self._reap_exiting()
            try:
                while generation == self._generation and len(self._waiting) < min(size, MAX_WAITING):
                    self._waiting.append(self._fork_one())
            except Exception:  # noqa: BLE001 - the next launch forks its own workers
                pass

    def _fork_one(self) -> Waiting:
        from ..worker.standby import standby_worker

        ctx = self.ensure_server()
        ends: list[Connection] = []
        try:
            for _ in range(4):
                ends.extend(ctx.Pipe(duplex=False))
            out_r, out_w, err_r, err_w, msg_r, msg_w, assign_r, assign_w = ends
            process = ctx.Process(
                target=standby_worker,
                args=(out_w, err_w, msg_w, assign_r),
                name="notebook_launcher-warm",
                daemon=False,
            )
            process.start()
        except BaseException:
            for end in ends:
                end.close()
            raise
        for end in (out_w, err_w, msg_w, assign_r):  # the worker's ends, now that it has them
            end.close()
        return Waiting(process, out_r, err_r, msg_r, assign_w)

    # ---------------------------------------------------------------- release
    def release(self) -> None:
        """End every waiting worker and the server this pool started; nothing of it remains."""
        with self._lock:
            self._idle_deadline = None
            if self._active:
                return  # a launch is using the server's workers; the idle release comes back later
            self._generation += 1
            self._reap_exiting()
            waiting, self._waiting = self._waiting, []
            for worker in waiting:
                _discard(worker)
            for helper in self._owned_helpers:
                try:
                    helper._stop()
                except Exception:  # noqa: BLE001
                    pass
            self._owned_helpers = []

    def settle(self) -> None:
        """Wait until the background refill (if any) has forked the waiting workers."""
        if threading.current_thread() is self._keeper:
            return
        with self._lock:
            while self._refill_wanted is not None or self._refilling:
                if self._keeper is None or not self._keeper.is_alive():
                    return
                self._wake.wait()

    @property
    def waiting(self) -> int:
        return len(self._waiting)


def _running(helper: Any) -> bool:
    return getattr(helper, "_fd", None) is not None or getattr(helper, "_forkserver_pid", None) is not None


def _main_module() -> list[str]:
    """Under a Jupyter kernel, each forkserver child re-runs the kernel's main module by name
    (multiprocessing's spawn preparation); preloading it makes that cheap (its imports are done)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = getattr(spec, "name", None)
    return ["__main__"] if not name or name == "__main__" else ["__main__", name]


def _discard(worker: Waiting) -> None:
    import os

    try:
        if worker.process.pid is not None:
            os.kill(worker.process.pid, signal.SIGKILL)
        worker.process.join(5)
        if worker.process.exitcode is not None:
            worker.process.close()
    except (OSError, ValueError):
        pass
    for conn in (worker.out, worker.err, worker.msg, worker.assign):
        conn.close()


def _reap(worker: Any) -> None:
    """End a finished launch worker and what it started (its process group), close its pipes."""
    from ..supervise.processes import REAP_SECONDS, signal_group

    signal_group(worker, signal.SIGKILL)  # it is only tearing itself down by now
    worker.process.join(REAP_SECONDS)
    if worker.process.exitcode is not None:
        worker.process.close()
    for conn in (worker.out, worker.err, worker.msg):
        conn.close()


_POOL: WarmPool | None = None


def warm_pool() -> WarmPool:
    """This kernel's pool (created on first use, released at exit)."""
    global _POOL
    if _POOL is None:
        _POOL = WarmPool()
        atexit.register(release_warm_pool)
    return _POOL


def release_warm_pool() -> None:
    """End the warm pool's processes now (they come back at the next launch that needs them)."""
    if _POOL is not None:
        _POOL.release()
