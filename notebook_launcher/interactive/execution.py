"""Run a %%ranks cell's code in one rank's namespace, the way IPython runs a cell.

Runs inside a rank process (never in the kernel). The statements run, then the last expression's
value is returned (the magic prints its repr per rank; `Ranks.run` sends it back). The cell's
source is put into `linecache`, so a traceback shows the cell's lines; our own frames are cut from
it, so the user sees where *their* code failed.

The stop button reaches a rank as SIGINT. It raises KeyboardInterrupt only while user code runs:
between cells the rank is talking to the kernel, and a message cut in half would break the pipe.
"""

from __future__ import annotations

import ast
import builtins
import linecache
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

_OWN_FILES = {__file__}


class _Gate:
    """Whether SIGINT may interrupt right now (only while a cell's code runs)."""

    open = False


def install_interrupt_gate() -> None:
    """SIGINT raises KeyboardInterrupt inside user code and is ignored between commands."""

    def on_sigint(signum: int, frame: Any) -> None:
        if _Gate.open:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_sigint)


def close_interrupt_gate() -> None:
    """Called by the command loop after any exception, in case one arrived before the gate closed."""
    _Gate.open = False


@contextmanager
def user_code() -> Iterator[None]:
    """Code in this block is the user's: the stop button interrupts it."""
    _Gate.open = True
    try:
        yield
    finally:
        _Gate.open = False


def own_module(path: str) -> None:
    """Frames of this file are ours, not the user's: cut them from tracebacks."""
    _OWN_FILES.add(path)


def fresh_namespace() -> dict[str, Any]:
    """A rank's namespace before its first cell: a module's globals named __main__.

    Classes defined in a cell then belong to `__main__`, which cloudpickle sends by value, so
    `%ranks pull` of a cell-defined object works in the kernel.
    """
    return {"__name__": "__main__", "__builtins__": builtins, "__doc__": None}


def remember_source(source: str, filename: str) -> None:
    """Keep the cell's lines where traceback and faulthandler look for them."""
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)


def compile_cell(source: str, filename: str) -> tuple[Any, Any | None]:
    """(code of the statements, code of the trailing expression or None), like IPython's last_expr."""
    tree = ast.parse(source, filename=filename, mode="exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(cast(ast.Expr, tree.body.pop()).value)
    body = compile(tree, filename, "exec", dont_inherit=True)
    tail = compile(last, filename, "eval", dont_inherit=True) if last is not None else None
    return body, tail


def run_cell(source: str, namespace: dict[str, Any], filename: str) -> Any:
    """Execute the cell in `namespace`; return the value of its last expression (None if it has none).

    A value is also stored as `_` in the namespace, as IPython does.
    """
    remember_source(source, filename)
    body, tail = compile_cell(source, filename)
    with user_code():
        exec(body, namespace)
        value = eval(tail, namespace) if tail is not None else None
    if value is not None:
        namespace["_"] = value
    return value


def call_function(fn: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
    with user_code():
        return fn(*args, **kwargs)


def without_own_frames(exc: BaseException) -> BaseException:
    """The traceback from the user's code on: the command loop's frames before it, and the SIGINT
    handler's frame after it (where the stop button landed), say nothing to the user."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in _OWN_FILES:
        tb = tb.tb_next
    last_user = None
    walk = tb
    while walk is not None:
        if walk.tb_frame.f_code.co_filename not in _OWN_FILES:
            last_user = walk
        walk = walk.tb_next
    if last_user is not None and isinstance(exc, KeyboardInterrupt):
        last_user.tb_next = None
    return exc.with_traceback(tb)


def value_repr(value: Any) -> str:
    """The repr a rank prints for a cell's last expression (a broken __repr__ must not fail the cell)."""
    try:
        return repr(value)
    except Exception as exc:  # noqa: BLE001 - show something rather than fail a cell that ran
        return f"<{type(value).__name__} object; repr() failed: {type(exc).__name__}: {exc}>"


def flush_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass
