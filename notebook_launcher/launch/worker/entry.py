"""The child side of notebook_launch: set up one rank, run the user's function, report back.

Imports nothing heavy at module level: under spawn the environment (thread counts, visible GPUs)
must be in place before torch loads.
"""

from __future__ import annotations

import io
import os
import signal
import sys
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from ...system.parent_death import die_with_parent
from ...system.signals import STACK_DUMP_SIGNAL

# The launcher asks a hung worker where it is stuck (faulthandler): system/signals.py.
UNSENT_ERROR_MARK = "notebook_launcher: this rank's error could not be sent to the launcher"


@dataclass
class WorkerSpec:
    """What one worker needs; picklable so it also travels to spawned children."""

    rank: int
    env: dict[str, str]
    payload: bytes | None  # cloudpickled (fn, args, kwargs) for spawn/forkserver
    threads: int | None  # intra-op threads to use, None = leave as set by the user


def _redirect_output(out_conn: Connection, err_conn: Connection) -> None:
    """Point fds 1 and 2 at the parent's pipes and give Python fresh line-buffered streams."""
    sys.stdout.flush() if sys.stdout else None
    sys.stderr.flush() if sys.stderr else None
    os.dup2(out_conn.fileno(), 1)
    os.dup2(err_conn.fileno(), 2)
    out_conn.close()
    err_conn.close()
    # typeshed marks sys.__stdout__/__stderr__ Final; code that restores sys.stdout from them must get
    # these streams, not the kernel's
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(  # type: ignore[misc]
        io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="replace", line_buffering=True
    )
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(  # type: ignore[misc]
        io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace", line_buffering=True
    )


def _lead_own_process_group() -> None:
    """Make this worker the leader of a new process group, so the launcher can end it together with
    everything it started (DataLoader workers, subprocesses) in one killpg."""
    try:
        os.setpgid(0, 0)
    except OSError:  # already a group leader (cannot happen for a fresh child), or not permitted
        pass


def _let_go_of_the_forkserver() -> None:
    """Drop this process's copy of the kernel's end of the forkserver's liveness pipe.

    Python hands every forkserver child that end (so that its own children could use the same
    server), and a forked child inherits it too. The server exits only when every copy is closed,
    and a warm-pool worker dies only when its parent, the server, does: kept, the copies in running
    workers would keep the server and themselves alive after the kernel is killed (by the OOM
    killer, say), holding their GPU memory for good. A worker that needs a forkserver later (a
    DataLoader's) starts its own, which dies with it."""
    from multiprocessing import forkserver

    server = forkserver._forkserver
    fd = getattr(server, "_forkserver_alive_fd", None)
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass
    # CPython's private attributes, which typeshed's ForkServer does not declare
    server._forkserver_alive_fd = None  # type: ignore[attr-defined]
    server._forkserver_address = None  # type: ignore[attr-defined]


def _reset_inherited_state() -> None:
    """A forked child inherits the kernel's runtime singletons and signal handlers: start clean."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(
        signal.SIGHUP, signal.SIG_DFL
    )  # the launcher's stop (processes.STOP_SIGNAL), even under nohup
    from ...runtime.world import preemption

    preemption.reset()
    preemption.install_handlers()  # SIGTERM / SIGUSR1: a graceful stop once an Accelerator listens
    if "notebook_launcher.runtime.world.state" in sys.modules:  # loaded already: importing costs nothing
        from ...runtime.world import state

        state._STATE = None
    sys.displayhook = sys.__displayhook__  # a forked kernel's hook would talk to the kernel's sockets


def prepare_process(out_conn: Connection, err_conn: Connection) -> None:
    """What every process the launcher starts does first, whatever it runs next (a launch's
    function, or the %%ranks command loop): its own process group, output to the parent's pipes,
    die with the parent, hold nothing that keeps the kernel's forkserver alive, no state inherited
    from the kernel, a stack dump on request."""
    _lead_own_process_group()
    _redirect_output(out_conn, err_conn)
    die_with_parent()  # the kernel dies: so does this worker, and no orphan keeps a GPU
    _let_go_of_the_forkserver()
    _reset_inherited_state()
    from . import detach

    detach.install()  # before user code: nothing may reach the kernel's sockets (detach.py)
    import faulthandler

    faulthandler.register(STACK_DUMP_SIGNAL, file=sys.stderr, all_threads=True, chain=False)


def run_worker(
    spec: WorkerSpec, target: Any, out_conn: Connection, err_conn: Connection, msg_conn: Connection
):
    """Entry point of every worker process (fork and spawn alike)."""
    prepare_process(out_conn, err_conn)
    run_prepared(spec, target, msg_conn)


def run_prepared(spec: WorkerSpec, target: Any, msg_conn: Connection) -> None:
    """The rest of a worker, once prepare_process() ran (here, or earlier in a warm-pool worker that
    waited for its launch): the env contract, the user's function, the report. Never returns."""
    os.environ.update(spec.env)  # before torch loads (spawn): thread counts, visible GPUs
    from ...runtime.world.state import exit_without_teardown

    exit_without_teardown()
    from ...system.host_memory import apply_threshold_if_asked
    from . import relay
    from .channel import WorkerChannel
    from .memory_sampler import MemorySampler

    channel = WorkerChannel(msg_conn)
    relay.connect(channel.telemetry_sink)
    channel.send_started()
    apply_threshold_if_asked()  # unset: glibc as in a plain process (issue 25)
    sampler = MemorySampler(channel.telemetry_sink).start()
    exit_code = 0
    try:
        if spec.threads is not None:
            import torch

            torch.set_num_threads(spec.threads)
        from ...runtime import telemetry

        telemetry.set_sink(channel.telemetry_sink)
        fn, args, kwargs = target if spec.payload is None else _load_payload(spec.payload)
        _count_collectives()
        _start_together()
        value = fn(*args, **kwargs)
        _finish_checkpoints()
        sampler.stop()
        _send_step_figures()
        _send_result(channel, value, spec.rank)
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the parent
        exit_code = 1
        sampler.stop()
        _report(channel, _without_own_frames(exc))
    finally:
        _flush()
        msg_conn.close()
    # Exit without running destructors: tearing down a gloo group whose peers have already left can
    # hang in ~ProcessGroupGloo, and everything the parent needs has been sent.
    _flush_queues()
    os._exit(exit_code)


def _count_collectives() -> None:
    """Keep the collective record the launcher's hang report reads (runtime/world/collective_log.py)."""
    from ...runtime.world import collective_log

    collective_log.install()


def _finish_checkpoints() -> None:
    """An asynchronous save_state still writing when the function returned is finished (a bounded wait,
    said in the log) before the worker exits (runtime/checkpointing/async_save.py)."""
    saving = sys.modules.get("notebook_launcher.runtime.checkpointing.async_save")
    if saving is not None:
        saving.wait_for_checkpoints("the end of the launched function")


def _send_step_figures() -> None:
    """The step clock's last figures (runtime/world/step_clock.py), before the result ends the run."""
    clock_module = sys.modules.get("notebook_launcher.runtime.world.step_clock")
    if clock_module is not None:
        clock_module.CLOCK.flush()


def _start_together() -> None:
    """Wait until every rank of this machine is here, then run the function on all at once (a
    counter in the launch's rendezvous store): no rank's failure stops a peer that has not started
    yet, so each attempt of a restarted run runs every rank (Accelerate's test_fault_tolerant)."""
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if local_world < 2:
        return
    import datetime

    from torch.distributed import TCPStore

    from ...system.store import file_store

    store = file_store(30 * 60) or TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
        timeout=datetime.timedelta(minutes=30),
    )  # fmt: skip
    key = f"notebook_launcher/start/{os.environ.get('GROUP_RANK', '0')}"
    if store.add(key, 1) == local_world:
        store.set(f"{key}/go", "1")
    store.wait([f"{key}/go"])


def _flush_queues() -> None:
    """What a multiprocessing child does at exit and os._exit skips: flush the user's
    multiprocessing.Queue puts (their feeder threads). Bounded: a queue nobody reads would block."""
    import threading
    from multiprocessing import util

    if not getattr(util, "_finalizer_registry", True):
        return  # nothing registered (no Queue, no Pool): no thread to start on the way out
    # CPython's private function, which typeshed's multiprocessing.util does not declare
    flushing = threading.Thread(target=util._run_finalizers, daemon=True)  # type: ignore[attr-defined]
    flushing.start()
    flushing.join(2.0)


def _load_payload(payload: bytes) -> Any:
    import cloudpickle

    return cloudpickle.loads(payload)


def _send_result(channel: Any, value: Any, rank: int) -> None:
    try:
        channel.send_result(value)
    except Exception as exc:
        raise TypeError(
            f"The return value of rank {rank} ({type(value).__name__}) could not be sent back to the notebook: "
            f"{exc}. Return plain data (tensors, numbers, dicts, lists) instead."
        ) from exc


def _without_own_frames(exc: BaseException) -> BaseException:
    """Start the traceback at the user's function: this module's frames say nothing to the user."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return exc.with_traceback(tb)


def _report(channel: Any, exc: BaseException) -> None:
    """Send the failure to the parent, which shows the traceback once and keeps it in the rank's log.

    When it cannot be sent (a broken pipe, an exception whose str() raises, ...), print the traceback
    to this worker's stderr instead, which the parent keeps and shows as the rank's last output.
    """
    try:
        channel.send_error(exc)
    except BaseException as send_failure:  # noqa: BLE001 - the traceback must reach the user somehow
        import traceback

        try:
            text = "".join(traceback.format_exception(exc))
        except BaseException:  # noqa: BLE001
            text = f"{type(exc).__name__} (its traceback could not be formatted)\n"
        try:
            sys.stderr.write(f"{UNSENT_ERROR_MARK} ({type(send_failure).__name__}: {send_failure}):\n{text}")
            sys.stderr.flush()
        except BaseException:  # noqa: BLE001
            pass


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
