"""Worker entry of `notebook-launcher launch`: run the user's script as `python script.py` would.

torch.distributed.run starts `python -u -m notebook_launcher.cli.bootstrap script|module TARGET
ARGS...` in every worker. This shim adds three things to running the target. The worker dies with
the launcher: torchrun starts each worker in a session of its own, so a launcher killed with
SIGKILL (an OOM killer, a scheduler, a test timeout) used to leave its workers running, holding
GPUs. When the script raises, it records the exception in the error file torchrun hands each
worker (TORCHELASTIC_ERROR_FILE, written through torch's own ErrorHandler), so the launcher can
name the failing rank and show its traceback; plain scripts do not write that file themselves (it
needs torch's `@record` around an entry function). And a script that finished ends without C++
static destruction, where torch sometimes aborts (system/process_exit.py). Memory is handled as in
notebook_launch's workers: glibc as in a plain process, unless NOTEBOOK_LAUNCHER_MMAP_THRESHOLD
asks otherwise (runtime/memory_phases.py).

The traceback is trimmed to the user's frames, printed through `sys.excepthook`, and the worker
exits with status 1, exactly like an uncaught exception in `python script.py`.
"""

from __future__ import annotations

import json
import os
import runpy
import signal
import sys
import time
import traceback

from ..records.names import LAUNCHER_PID_ENV
from ..system.parent_death import die_with_parent
from ..system.process_exit import leave

USAGE = "usage: python -m notebook_launcher.cli.bootstrap {script,module} TARGET [ARGS...]"
ERROR_FILE_ENV = "TORCHELASTIC_ERROR_FILE"
_OWN_FILES = {os.path.abspath(__file__), os.path.abspath(runpy.__file__), "<frozen runpy>"}


def die_with_launcher() -> None:
    """Have Linux SIGKILL this worker when its parent dies (PR_SET_PDEATHSIG), as notebook workers do.

    The parent is the launcher itself: `notebook-launcher launch` runs torchrun's agent in its own
    process, and the agent starts the workers from its main thread (the death signal follows the
    thread that started the child, so it fires only when the launcher exits). If the launcher died
    before the signal was armed, the parent is no longer the launcher's pid: end right away.
    """
    expected = os.environ.pop(LAUNCHER_PID_ENV, None)  # the script's own children must not see it
    if not die_with_parent():
        return
    if expected is not None and os.getppid() != int(expected):
        os.kill(os.getpid(), signal.SIGKILL)


def whole_lines() -> None:
    """Write each printed line in one write, as notebook_launch's workers do (worker/entry.py).

    torchrun runs workers with `python -u`, whose text streams write every piece at once: `print(x)`
    is two writes, the text and then its newline. torchrun's --tee reads each worker's log file a
    line at a time and copies it to the console with the rank's prefix; reading between the two
    writes, it copied the text without its newline, and the other rank's line was then glued to it
    (`{...}[rank1] LAUNCHER_LISTENS {...}`, seen in tests/test_network_exposure.py). Line-buffered,
    a line goes out whole when its newline is printed; a flush() still sends a partial line (tqdm's).
    """
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(line_buffering=True, write_through=False)
            except (ValueError, OSError):  # a stream replaced by something else: leave it be
                pass


def run_target(kind: str, target: str, args: list[str]) -> None:
    """Run a script path or module name as `__main__`, with sys.argv and sys.path as Python sets them."""
    if kind == "script":
        script = os.path.abspath(target)
        sys.argv = [script, *args]
        sys.path[0] = os.path.dirname(script)
        runpy.run_path(script, run_name="__main__")
    elif kind == "module":
        sys.argv = [target, *args]
        sys.path[0] = os.getcwd()
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        raise SystemExit(f"{USAGE}\nunknown kind {kind!r}")


def _is_own(filename: str) -> bool:
    return filename in _OWN_FILES or os.path.abspath(filename) in _OWN_FILES


def _trim(exc: BaseException) -> None:
    """Drop the frames of this shim and of runpy from the front of the traceback."""
    tb = exc.__traceback__
    while tb is not None and _is_own(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    if tb is not None:
        exc.__traceback__ = tb


def record_failure(exc: BaseException) -> None:
    """Write the exception into torchrun's error file for this worker (when there is one)."""
    path = os.environ.get(ERROR_FILE_ENV)
    if not path:
        return
    from torch.distributed.elastic.multiprocessing.errors import get_error_handler

    get_error_handler().record_exception(exc)
    # The handler's traceback comes from sys.exc_info(), untrimmed before Python 3.11, and its
    # timestamp is in whole seconds; a precise one lets the launcher tell which rank failed first
    # when a peer's connection error follows within the same second.
    try:
        with open(path) as fp:
            data = json.load(fp)
        data["message"]["extraInfo"]["py_callstack"] = "".join(traceback.format_exception(exc))
        data["message"]["extraInfo"]["time_ns"] = str(time.time_ns())
        with open(path, "w") as fp:
            json.dump(data, fp)
    except (OSError, ValueError, KeyError, TypeError):
        pass


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        raise SystemExit(USAGE)
    kind, target, *args = argv
    die_with_launcher()
    whole_lines()
    from ..system.host_memory import apply_threshold_if_asked

    apply_threshold_if_asked()  # as in notebook_launch's workers: glibc as in a plain process unless asked
    try:
        run_target(kind, target, args)
    except SystemExit as exc:  # sys.exit() in the script: its code, then the same clean end
        leave(_exit_code(exc.code))
    except Exception as exc:
        _trim(exc)
        try:
            record_failure(exc)
        finally:
            sys.excepthook(type(exc), exc, exc.__traceback__)
            sys.stderr.flush()
        sys.exit(1)
    except KeyboardInterrupt as exc:  # the launcher forwards Ctrl-C; show where the script was
        _trim(exc)
        sys.excepthook(type(exc), exc, exc.__traceback__)
        sys.exit(130)
    leave(0)


def _exit_code(code: object) -> int:
    """What Python makes of SystemExit(code): None is 0, an int itself, anything else printed and 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    main(sys.argv[1:])
