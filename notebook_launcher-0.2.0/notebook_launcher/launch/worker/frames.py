"""An exception's traceback as plain data, taken where the frames still exist (in the worker).

The kernel cannot see a worker's frames, only what the worker sends. To show the user's frames
with their source and fold the libraries' (launch/cell/traceback_view.py), it needs each frame's
file, line, function, arguments, source lines and whose code it is — which library, or the
user's. That is decided here: from a frame's module name and whether its file lies in the
standard library, site-packages or this package. Everything returned is dicts, lists, str and int,
so it pickles anywhere (also across cluster nodes) and a newer kernel can still read it.
"""

from __future__ import annotations

import builtins
import linecache
import os
import site
import sys
import sysconfig
import traceback
from functools import lru_cache
from typing import Any

CONTEXT_LINES = 2  # source lines shown before the failing one, as IPython shows a few
MAX_CHAIN = 16  # causes/contexts followed; a longer chain is cut (the full text keeps it)
_OUR_PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def capture(exc: BaseException) -> list[dict[str, Any]] | None:
    """The exception and the ones it was raised from, oldest first (the order Python prints them).

    Each is {"type": its name, "exception": Python's last line(s) for it, "link": "cause",
    "context" or None (how it leads to the next), "frames": [frame, ...]}. None for exception
    groups, whose tree the plain text (traceback.format_exception) already shows best.
    """
    chain: list[dict[str, Any]] = []
    seen: set[int] = set()
    link: str | None = None
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(chain) < MAX_CHAIN:
        if _is_group(current):
            return None
        seen.add(id(current))
        chain.append(
            {
                "type": type_name(current),
                "exception": _exception_lines(current),
                "link": link,
                "frames": _frames(current),
            }
        )
        if current.__cause__ is not None:
            current, link = current.__cause__, "cause"
        elif current.__context__ is not None and not current.__suppress_context__:
            current, link = current.__context__, "context"
        else:
            current = None
    chain.reverse()  # each block's link now says how it leads to the block after it
    return chain


def _is_group(exc: BaseException) -> bool:
    group = getattr(builtins, "BaseExceptionGroup", None)  # Python 3.11+
    return group is not None and isinstance(exc, group)


def type_name(value: object) -> str:
    """A value's type as Python names it in a traceback: qualified unless a builtin or __main__'s."""
    kind = type(value)
    module = kind.__module__
    return kind.__qualname__ if module in ("builtins", "__main__") else f"{module}.{kind.__qualname__}"


def _exception_lines(exc: BaseException) -> list[str]:
    try:
        return [line.rstrip("\n") for line in traceback.format_exception_only(type(exc), exc)]
    except Exception:  # a broken __str__: the type still tells something
        return [type(exc).__name__]


def _frames(exc: BaseException) -> list[dict[str, Any]]:
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        try:
            frames.append(_frame(tb))
        except Exception:  # one odd frame must not cost the others
            frames.append({"file": "?", "line": tb.tb_lineno, "name": "?", "args": "", "library": None})
        tb = tb.tb_next
    return frames


def _frame(tb: Any) -> dict[str, Any]:
    frame, code, lineno = tb.tb_frame, tb.tb_frame.f_code, tb.tb_lineno
    module = frame.f_globals.get("__name__") if isinstance(frame.f_globals, dict) else None
    return {
        "file": code.co_filename,
        "line": lineno,
        "name": getattr(code, "co_qualname", code.co_name),
        "args": _arguments(code),
        "library": library_of(code.co_filename, module if isinstance(module, str) else None),
        "first_line": code.co_firstlineno,
        "source": source_lines(code.co_filename, lineno, code.co_firstlineno),
    }


def _arguments(code: Any) -> str:
    """`(self, x, *args, **kwargs)`: the names IPython shows after the function's name."""
    if code.co_name == "<module>":
        return ""
    count = code.co_argcount + code.co_kwonlyargcount
    names = list(code.co_varnames[:count])
    flags = code.co_flags
    if flags & 0x04:  # CO_VARARGS
        names.insert(code.co_argcount, "*" + code.co_varnames[count])
        count += 1
    if flags & 0x08:  # CO_VARKEYWORDS
        names.append("**" + code.co_varnames[count])
    return f"({', '.join(names)})"


def source_lines(filename: str, lineno: int, first_line: int = 1) -> list[tuple[int, str]]:
    """The failing line and a few before it, within its function (none when this process cannot
    read the file)."""
    first = max(1, first_line, lineno - CONTEXT_LINES)
    lines = [(n, linecache.getline(filename, n).rstrip("\n")) for n in range(first, lineno + 1)]
    return lines if lines[-1][1].strip() else []


def library_of(filename: str, module: str | None) -> str | None:
    """The library a frame belongs to ("torch", "notebook_launcher", "threading"), or None: the user's."""
    if filename.startswith("<frozen "):
        return (module or filename[len("<frozen ") : -1]).partition(".")[0]
    if filename.startswith("<") or not filename:
        return None  # a notebook cell, exec'd code: the user's
    path = os.path.abspath(filename)
    if path.startswith(_OUR_PACKAGE + os.sep):
        return "notebook_launcher"
    for root in _library_roots():
        if path.startswith(root):
            top = module.partition(".")[0] if module and module != "__main__" else ""
            return top or path[len(root) :].split(os.sep, 1)[0].removesuffix(".py") or "python"
    return None


@lru_cache(maxsize=1)
def _library_roots() -> tuple[str, ...]:
    """Where installed code lives: site-packages (also a venv's), the standard library."""
    roots = set()
    for key in ("purelib", "platlib", "stdlib", "platstdlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            roots.add(path)
    try:
        roots.update(site.getsitepackages())
        roots.add(site.getusersitepackages())
    except Exception:  # a stripped-down site module
        pass
    roots.update(p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages"))
    # Longest first: site-packages inside the stdlib folder wins over the stdlib itself.
    return tuple(sorted((os.path.abspath(r) + os.sep for r in roots if r), key=len, reverse=True))
