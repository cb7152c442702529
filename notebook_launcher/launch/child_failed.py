"""WorkerError as torch elastic's ChildFailedError too, so code written for Accelerate's
notebook_launcher (`except ChildFailedError`) catches our failures.

Built by result.py the first time a WorkerError is made in a process that has already loaded torch:
code that catches ChildFailedError imported torch to name it, and a kernel that never imported torch
has no such class to catch. So the launcher never imports torch for it (issue 34), and this module
imports nothing of the package (result.py asks it, with its own class as the base).
"""

from __future__ import annotations

from typing import Any

_NO_ERROR_FILE = "<N/A>"  # torch's own placeholder: our traceback comes through the pipe, not a file


def elastic_subclass(base: type) -> type | None:
    """`base` (result.WorkerError) that is also a ChildFailedError, with torch's `.name` and
    `.failures` ({rank: ProcessFailure}); None without torch.distributed."""
    try:
        from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure
    except ImportError:
        return None

    def process_failure(failure: Any) -> ProcessFailure:
        """torch's record of one failed rank, its message the worker's traceback (or our summary)."""
        code = failure.exitcode if failure.exitcode is not None else 1
        record = ProcessFailure(local_rank=failure.rank, pid=-1, exitcode=code, error_file=_NO_ERROR_FILE)
        # torch annotates `message: str`, yet it stores the error file's dict there and its
        # ChildFailedError.format_msg reads that dict's py_callstack: the shape we give it
        record.message = {  # type: ignore[assignment]
            "message": failure.summary(),
            "extraInfo": {
                "py_callstack": failure.traceback or failure.summary(),
                "timestamp": record.timestamp,
            },
        }
        return record

    class WorkerError(base, ChildFailedError):
        """The WorkerError every launch raises once torch is loaded (named so in the cell)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.name = "notebook_launcher"
            self.failures = {f.rank: process_failure(f) for f in (self.failure, *self.others)}

    WorkerError.__module__ = __name__
    return WorkerError
