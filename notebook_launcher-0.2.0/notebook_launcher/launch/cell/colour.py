"""Whether the error text we render carries ANSI colours, and which: IPython's own.

A notebook renders ANSI colours in an error's text, a terminal does too; a log file or a pipe
would get escape codes as garbage. So: colour in a Jupyter kernel (unless `%colors nocolor`),
otherwise only when stderr is a terminal, and never when NO_COLOR is set (no-color.org).
The codes are those of IPython's default ("Neutral") traceback scheme, so a worker's traceback
looks like the kernel's own.
"""

from __future__ import annotations

import os
import sys

RESET = "\x1b[0m"
EXCEPTION = "\x1b[0;31m"  # an exception's name
LOCATION = "\x1b[0;32m"  # "Cell In[3], line 8", "/path/file.py:12"; the arrow at the failing line
FUNCTION = "\x1b[0;36m"  # the function's name
ARGUMENTS = "\x1b[0;34m"  # its arguments
LINE_NUMBER = "\x1b[1;32m"  # the numbers of the lines around the failing one


def wanted() -> bool:
    """Whether text rendered now, for this process's cell or terminal, should be coloured."""
    if os.environ.get("NO_COLOR"):
        return False
    shell = ipython_shell()
    if shell is not None:
        if str(getattr(shell, "colors", "")).lower() == "nocolor":
            return False
        if getattr(shell, "kernel", None) is not None:
            return True  # a Jupyter kernel: the front end renders the codes
    try:
        return sys.stderr.isatty()
    except Exception:  # a replaced stderr without isatty
        return False


def paint(text: str, code: str, on: bool) -> str:
    """`text` in colour `code`, or as it is when colours are off."""
    return f"{code}{text}{RESET}" if on and text else text


def ipython_shell():
    """The running IPython shell, without importing IPython into a process that has not."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return None
    try:
        return ipython.get_ipython()
    except Exception:
        return None
