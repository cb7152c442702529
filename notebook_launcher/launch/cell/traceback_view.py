"""A worker's traceback as IPython shows one: the user's frames with their source, libraries folded.

Input is what launch/worker/frames.py captured in the worker. Each frame the user wrote is shown
as IPython's VerboseTB shows it (`Cell In[3], line 8, in train()`, two lines of context, an arrow
at the failing line; the source text itself is left uncoloured and whole, so a search finds it).
Each run of library frames (torch, DDP's wrappers, this package, the standard library) becomes
one line, `… 6 frames in torch …`: those frames are rarely where the bug is and bury the one that
is. The innermost frame is always shown (it says what raised), and nothing is folded when no
frame is the user's. The unfolded text stays one attribute away (`.full_traceback`).
"""

from __future__ import annotations

import linecache
import os
import re
from collections.abc import Callable
from typing import Any

from ..worker.frames import source_lines
from . import colour

HEADER = "Traceback (most recent call last)"
HEADER_COLUMN = 42  # where IPython puts HEADER after the exception's name
REPEATS = 3  # a recursing frame is shown this many times, as Python does
FOLD_HINT = (
    "Library frames are folded; every frame: err.full_traceback "
    "(for the error a cell raised: sys.last_value.full_traceback)."
)
_LINKS = {
    "cause": "The above exception was the direct cause of the following exception:",
    "context": "During handling of the above exception, another exception occurred:",
}
_FOLD_INDENT, _FOLD_MARK = "    ", "…"
_FOLD = re.compile(rf"^{_FOLD_INDENT}(?:\x1b\[[0-9;]*m)?{_FOLD_MARK} \d+ frames? in ", re.M)
_FILE_LINE = re.compile(r'^  File "(?P<file>[^"]+)", line (?P<line>\d+)')

Labeller = Callable[[str], "str | None"]


def render_chain(
    chain: list[dict[str, Any]], *, on: bool, fold: bool = True, label: Labeller | None = None
) -> str:
    """The text of a captured exception chain; `on`: ANSI colours; `label`: a cell's display name."""
    fold = fold and any(f.get("library") is None for block in chain for f in block["frames"])
    parts: list[str] = []
    for block in chain:
        records = _records(block["frames"], fold, on, label)
        parts += ["\n".join([_header(block, on), *records[:1]]), *records[1:]]
        parts.append("\n".join(_exception_lines(block, on)))
        if block.get("link") in _LINKS:
            parts.append(_LINKS[block["link"]])
    return "\n\n".join(p.rstrip("\n") for p in parts if p)


def has_folds(text: str) -> bool:
    """Whether rendered text folded some frames (the error then says where all of them are)."""
    return _FOLD.search(text) is not None


def _records(frames: list[dict[str, Any]], fold: bool, on: bool, label: Labeller | None) -> list[str]:
    records: list[str] = []
    run: list[dict[str, Any]] = []  # library frames waiting to be folded into one line
    items = _collapse_repeats(frames)
    for index, item in enumerate(items):
        if isinstance(item, int):  # a recursing frame's further repeats
            if run:
                run += [run[-1]] * item
            else:
                records.append(
                    _FOLD_INDENT
                    + colour.paint(f"[… the frame above {item} more times]", colour.EXCEPTION, on)
                )
            continue
        if fold and item.get("library") and index < len(items) - 1:
            run.append(item)
            continue
        if run:
            records.append(fold_line(run, on))
            run = []
        records.append(_frame(item, on, label))
    return records


def _collapse_repeats(frames: list[dict[str, Any]]) -> list[Any]:
    """A frame repeated back to back (recursion) shown REPEATS times, then how many more (an int),
    as Python's "[Previous line repeated 996 more times]" does."""
    items: list[Any] = []
    same = 0
    for index, frame in enumerate(frames):
        previous = frames[index - 1] if index else None
        key = (frame["file"], frame["line"], frame["name"])
        same = same + 1 if previous and key == (previous["file"], previous["line"], previous["name"]) else 0
        if same < REPEATS:
            items.append(frame)
        elif same == REPEATS:
            items.append(1)
        else:
            items[-1] += 1
    return items


def fold_line(run: list[dict[str, Any]], on: bool) -> str:
    """`    … 6 frames in torch, notebook_launcher …` for a run of library frames."""
    names = list(dict.fromkeys(frame["library"] for frame in run))
    count = f"{len(run)} frame{'s' if len(run) != 1 else ''}"
    return _FOLD_INDENT + colour.paint(f"{_FOLD_MARK} {count} in {', '.join(names)} …", colour.EXCEPTION, on)


def _header(block: dict[str, Any], on: bool) -> str:
    name = _type_name(block)
    padding = " " * max(1, HEADER_COLUMN - len(name))
    return f"{colour.paint(name, colour.EXCEPTION, on)}{padding}{HEADER}"


def _type_name(block: dict[str, Any]) -> str:
    return block.get("type") or (block["exception"] or ["Exception"])[-1].partition(":")[0]


def _exception_lines(block: dict[str, Any], on: bool) -> list[str]:
    """Python's last line(s) for the exception, its name coloured as IPython colours it."""
    name = _type_name(block)
    lines = []
    for line in block["exception"]:
        if on and (line == name or line.startswith(name + ":")):
            line = colour.paint(name, colour.EXCEPTION, on) + line[len(name) :]
        lines.append(line)
    return lines


def _frame(frame: dict[str, Any], on: bool, label: Labeller | None) -> str:
    prefix, where = _location(frame, label)
    first = prefix + colour.paint(where, colour.LOCATION, on)
    if frame.get("args"):
        name = colour.paint(frame["name"], colour.FUNCTION, on)
        first += f", in {name}{colour.paint(frame['args'], colour.ARGUMENTS, on)}"
    return "\n".join([first, *_source_block(frame, on)])


def _location(frame: dict[str, Any], label: Labeller | None) -> tuple[str, str]:
    """("Cell ", "In[3], line 8") for a cell of this kernel, IPython's ("File ", "path:12") otherwise."""
    path, line = frame["file"], frame["line"]
    named = label(path) if label else None
    if named:
        kind, _, name = named.rpartition(" ")
        return (f"{kind} " if kind else "", f"{name}, line {line}")
    if path.startswith("<") and path.endswith(">") and "In[" in path:
        return ("", f"{path[1:-1]}, line {line}")  # "%%ranks In[5], line 3", as IPython names a cell
    home = os.path.expanduser("~")
    if home not in ("", "/", "~") and path.startswith(home + os.sep):
        path = "~" + path[len(home) :]
    return ("File ", f"{path}:{line}")


def _source_block(frame: dict[str, Any], on: bool) -> list[str]:
    """The context lines and the failing one (arrowed), dedented together, as IPython shows them."""
    source = list(
        frame.get("source") or source_lines(frame["file"], frame["line"], frame.get("first_line", 1))
    )
    while source and not source[0][1].strip():
        source.pop(0)  # a blank line before a function says nothing
    if not source:
        return []
    indent = min(len(text) - len(text.lstrip()) for _, text in source if text.strip())
    shown = []
    for number, text in source:
        text = text[indent:] if text.strip() else ""
        if number == frame["line"]:
            arrow = "-" * max(0, 5 - len(str(number))) + "> " + str(number)
            shown.append(f"{colour.paint(arrow, colour.LOCATION, on)} {text}")
        else:
            shown.append(f"{colour.paint(str(number).rjust(7), colour.LINE_NUMBER, on)} {text}".rstrip())
    return shown


def fill_source(text: str) -> str:
    """Python-format traceback text with the source lines the worker could not read added from this
    process (a spawned worker has no notebook cell in its linecache; the kernel has them all)."""
    lines = text.split("\n")
    out = []
    for index, line in enumerate(lines):
        out.append(line)
        match = _FILE_LINE.match(line)
        following = lines[index + 1] if index + 1 < len(lines) else ""
        if match and not following.startswith("    "):
            source = linecache.getline(match["file"], int(match["line"])).strip()
            if source:
                out.append(f"    {source}")
    return "\n".join(out)
