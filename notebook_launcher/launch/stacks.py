"""Make a faulthandler stack dump readable: add each frame's source line."""

from __future__ import annotations

import linecache
import re

_FRAME = re.compile(r'^\s*File "(?P<file>.+)", line (?P<line>\d+) in (?P<func>.+)$')


def with_source_lines(dump: str) -> str:
    """faulthandler prints file and line only; add the source line (works for notebook cells too,
    whose source the kernel keeps in linecache)."""
    out = []
    for line in dump.splitlines():
        out.append(line)
        match = _FRAME.match(line)
        if match:
            source = linecache.getline(match["file"], int(match["line"])).strip()
            if source:
                out.append(f"    {source}")
    return "\n".join(out)
