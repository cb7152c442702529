"""save_state(async_save=True): the training thread stages the state, one background thread per
process writes it and publishes the folder.

The order of one asynchronous save, on every rank:
1. (calling thread) wait for the previous save of this process, if still writing;
2. (calling thread) the hidden folder is made, the state dicts are taken (an FSDP gather is a
   collective on the training's group, so it runs here, in the same order on every rank) and every
   tensor is copied into staging buffers (writers.py); save_state returns;
3. (background thread) this rank's files are written; a barrier on the checkpoint's own gloo group
   says every rank's files are complete; the main process renames the hidden folder into place
   (one os.replace), applies total_limit, tells the launcher; a second barrier, so that on every rank
   "the save is finished" means "the folder is published". The first barrier is an all-reduce of
   "my files are written": a rank whose write failed (a full disk) says so, no rank publishes, and
   every rank's next save_state/end_training raises the failure.
A rank that dies in step 3 never reaches the first barrier, so the folder is never renamed: the
newest folder under checkpoints/ stays the previous complete one. The agreement and the barrier
after publishing are bounded (NOTEBOOK_LAUNCHER_CHECKPOINT_AGREE_SECONDS, 600 s by default; on one
machine a dead peer's closed connection ends them at once): a rank that does not come (dead on a
machine that is gone, or hung) makes the others' save fail, said in their logs and raised by their
next save_state/end_training, instead of leaving their writer threads waiting until the launcher ends
them. (DCP's own collectives in a sharded save keep torch's default timeout.)

Why a separate process group: the background thread's collectives (the barriers, DCP's planning for
sharded state) run while the training thread runs its own; two threads issuing collectives on one
group could interleave differently on each rank and deadlock. The group is made by every rank at
the first asynchronous save (new_group is a collective of the calling thread); on a single process
there is none and no barrier.

Why a thread and not torch's process checkpointer (AsyncCheckpointerType.PROCESS): that one starts
a second interpreter per rank with multiprocessing's spawn, which imports torch again, forms its own
gloo group over a TCPStore on a free port of MASTER_ADDR, and re-imports the parent's `__main__`.
Tried under notebook_launch from a script (torch 2.13, 2 CPU ranks): it saves when the script has an
`if __name__ == "__main__":` guard; without one, a rank's checkpoint process ran the whole script
again (a nested launch) — a raw torch script without the guard would call init_process_group again
there, the likely cause of "Checkpoint background process is dead". A thread needs none of that
(nor a guard the user may not have); the state is copied to host memory here anyway, and file writes
and torch.save's large copies release the GIL.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from ...errors import AcceleratorError
from ...records.names import CHECKPOINT_AGREE_ENV, CHECKPOINT_WAIT_ENV
from .progress import WriteProgress
from .writers import StagedWriter, StagingBuffers

logger = logging.getLogger("notebook_launcher.checkpoint")

WAIT_ENV = CHECKPOINT_WAIT_ENV
DEFAULT_WAIT_SECONDS = 600.0  # the end of a run waits this long for a save still being written
AGREE_ENV = CHECKPOINT_AGREE_ENV
DEFAULT_AGREE_SECONDS = 600.0  # a rank whose files are written waits this long for the others'


def agree_seconds() -> float:
    """The bound on the checkpoint group's collectives (NOTEBOOK_LAUNCHER_CHECKPOINT_AGREE_SECONDS)."""
    try:
        seconds = float(os.environ.get(AGREE_ENV, DEFAULT_AGREE_SECONDS))
    except ValueError:
        return DEFAULT_AGREE_SECONDS
    return seconds if seconds > 0 else DEFAULT_AGREE_SECONDS


@dataclass
class CheckpointRecord:
    """One asynchronous save, as `result` and the log report it."""

    step: int
    folder: str
    blocked_s: float  # how long save_state held the training thread (waiting, staging)
    total_s: float | None = None  # from the call until the folder was published (None: not yet)
    staged_bytes: int = 0  # what this rank copied to host memory
    rank: int = 0


class BackgroundSaver:
    """This process's asynchronous saves: one writer thread per save, one save in flight at a time."""

    def __init__(self) -> None:
        self.buffers = StagingBuffers()
        self.history: list[CheckpointRecord] = []
        self.before_write: Callable[[int, Path], None] | None = None  # tests: stop at a chosen write
        self.after_write: Callable[[], None] | None = None  # tests: this rank's files done, not yet agreed
        self.writing: StagedWriter | None = None  # the save being written (tests watch its bytes)
        self._pending: Future[None] | None = None
        self._group: Any = None
        self._group_world: Any = None  # the default group self._group was made beside
        self._group_made = False
        self.pid = os.getpid()

    # ----------------------------------------------------------------------------- the group
    def group(self) -> Any:
        """The checkpoint's own gloo group (None on one process); made on first use, on every rank,
        and again when the default group is a new one (a run that ended its group and made another)."""
        import torch.distributed as dist

        world = dist.group.WORLD if dist.is_available() and dist.is_initialized() else None
        if not self._group_made or world is not self._group_world:
            self._group = (
                dist.new_group(backend="gloo") if world is not None and dist.get_world_size() > 1 else None
            )
            self._group_world = world
            self._group_made = True
        return self._group

    def _all_ranks_wrote(self, wrote: bool, record: CheckpointRecord) -> bool:
        """Whether every rank wrote its files (an all-reduce of one flag: also the barrier before
        publishing, so a rank whose write failed does not leave the others waiting). Bounded by the
        group's timeout: a rank that died or hangs (a machine gone without closing its connections)
        makes this a failed save, said in the log, instead of a writer thread waiting for good."""
        if self._group is None:
            return wrote
        import torch
        import torch.distributed as dist

        flag = torch.tensor([1 if wrote else 0], dtype=torch.int32)
        self._bounded(dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=self._group, async_op=True), record)
        return bool(flag.item())

    def _barrier(self, record: CheckpointRecord) -> None:
        if self._group is not None:
            import torch.distributed as dist

            self._bounded(dist.barrier(group=self._group, async_op=True), record)

    def _bounded(self, work: Any, record: CheckpointRecord) -> None:
        """Wait for one of the checkpoint group's collectives up to the bound (Work.wait's timeout: the
        group itself keeps torch's default, as a timeout given to new_group needs a store that can
        change its own, which the launch's rendezvous store need not); past it, a failed save."""
        bound = agree_seconds()
        try:
            work.wait(timeout=timedelta(seconds=bound))
        except Exception as exc:  # noqa: BLE001 - the bound passed or a connection closed: a failed save
            said = (
                f"the checkpoint of step {record.step} ({record.folder}) was not published: the ranks did not all "
                f"say their files were written within {bound:.0f} s ({AGREE_ENV}; a rank died, hangs, or "
                f"writes much longer than this one): {type(exc).__name__}: {str(exc)[:300]}"
            )
            logger.error("rank %d: %s", record.rank, said)
            raise AcceleratorError(said + ". The previous checkpoint is still the latest.") from exc

    # ------------------------------------------------------------------------------ waiting
    @property
    def in_flight(self) -> bool:
        return self._pending is not None and not self._pending.done()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the save being written; False when timeout passed first. A failed background write
        is raised here (the next save_state, load_state, end_training or the end of the run)."""
        pending = self._pending
        if pending is None:
            return True
        try:
            pending.result(timeout=timeout)
        except TimeoutError:
            return False
        except BaseException as exc:
            self._pending = None
            raise AcceleratorError(
                f"The asynchronous save_state() to {self.history[-1].folder!r} failed in its background "
                f"thread: {type(exc).__name__}: {exc}. That checkpoint was not published; the previous one "
                "is still the latest."
            ) from exc
        self._pending = None
        return True

    def wait_at_end(self, where: str) -> bool:
        """The bounded wait of end_training() and of the end of a launched function, said in the log."""
        if not self.in_flight:
            return self.wait()
        bound = float(os.environ.get(WAIT_ENV, DEFAULT_WAIT_SECONDS))
        record = self.history[-1]
        logger.warning(
            "%s: waiting up to %.0f s (%s) for the checkpoint of step %d being written to %s",
            where,
            bound,
            WAIT_ENV,
            record.step,
            record.folder,
        )
        if self.wait(timeout=bound):
            return True
        logger.error(
            "%s: the checkpoint %s was still being written after %.0f s and was not published; the previous "
            "one is the latest.",
            where,
            record.folder,
            bound,
        )
        return False

    # ------------------------------------------------------------------------------ saving
    def submit(
        self,
        writer: StagedWriter,
        record: CheckpointRecord,
        started: float,
        publish: Callable[[], None],
    ) -> None:
        """Write writer's staged files in the background, then publish() on the main process."""
        self.history.append(record)
        future: Future[None] = Future()
        progress = WriteProgress(
            record.rank, record.step, record.folder, record.staged_bytes, writer.bytes_on_disk
        )
        progress.staged()  # before save_state returns: the launcher shows the save in flight

        def write_and_publish() -> None:
            from ..world import collective_log

            collective_log.not_counted_in_this_thread()  # the hang report counts the training's collectives
            failure: BaseException | None = None
            progress.begin()
            try:
                writer.write_all(self.before_write, progress.file_written)
            except Exception as exc:  # noqa: BLE001 - the other ranks must hear of it, then it is raised
                failure = exc
            progress.finish(failure is None)
            if self.after_write is not None:
                self.after_write()
            if not self._all_ranks_wrote(failure is None, record):  # every rank's files are complete, or not
                raise failure or AcceleratorError(
                    "another rank's background write failed (its error is in its own output)"
                )
            publish()
            self._barrier(record)  # published, as seen from every rank
            record.total_s = time.perf_counter() - started

        def run() -> None:
            try:
                write_and_publish()
            except BaseException as exc:  # noqa: BLE001 - raised on the training thread by wait()
                future.set_exception(exc)
            else:
                future.set_result(None)

        # One thread per save, ended with it (no idle thread left in a kernel that forks later); not a
        # daemon, so a plain script's interpreter finishes the write before it exits.
        self._pending, self.writing = future, writer
        threading.Thread(target=run, name="checkpoint-writer", daemon=False).start()


_saver: BackgroundSaver | None = None
_lock = threading.Lock()


def saver() -> BackgroundSaver:
    """This process's saver (made on the first asynchronous save)."""
    global _saver
    with _lock:
        if _saver is None or _saver.pid != os.getpid():  # a forked child: not its parent's saves
            _saver = BackgroundSaver()
        return _saver


def finish_pending() -> None:
    """save_state and load_state: the save being written first (unbounded: the next one needs it)."""
    if _saver is not None and _saver.pid == os.getpid():
        _saver.wait()


def wait_for_checkpoints(where: str) -> bool:
    """For the end of a launched function and end_training(): finish a save still being written."""
    if _saver is None or _saver.pid != os.getpid():
        return True
    return _saver.wait_at_end(where)
