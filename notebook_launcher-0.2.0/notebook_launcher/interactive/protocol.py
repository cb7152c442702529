"""What the kernel and a rank say to each other, in plain pickled tuples.

Kernel -> rank, on the rank's command pipe: `(command, id, payload)`.
Rank -> kernel, on its message pipe (the same pipe and envelope as a launch's worker channel):
`(kind, payload)`; READY once the process group is up, then one REPLY per command, carrying the
command's id so a late answer to an interrupted command is never taken for the next one's.
User objects inside (values, pushed names, functions) are cloudpickled on their own, GPU tensors
moved to the CPU by the side that holds them.
"""

from __future__ import annotations

import pickle
from typing import Any

# commands
EXEC = "exec"  # {"code": str, "filename": str, "show": bool, "want_value": bool}
CALL = "call"  # {"payload": cloudpickled (fn, args, kwargs)}
PULL = "pull"  # {"name": str}
PUSH = "push"  # {"values": cloudpickled dict}
EXIT = "exit"  # None

# messages (besides the launch channel's STARTED, METRIC and PROGRESS)
READY = "ready"  # {"pid": int, "device": str, "backend": str | None}
REPLY = "reply"  # {"id": int, "ok": bool, "value": bytes | None, "error": dict | None}


def encode(*parts: Any) -> bytes:
    return pickle.dumps(tuple(parts), protocol=pickle.HIGHEST_PROTOCOL)


def decode(raw: bytes) -> tuple:
    return pickle.loads(raw)
