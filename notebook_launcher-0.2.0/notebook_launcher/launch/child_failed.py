"""WorkerError as torch elastic's ChildFailedError too, so code written for Accelerate's
notebook_launcher (`except ChildFailedError`) catches our failures.

Imported by the launch package (launch/__init__.py), which already needs torch; it registers its
class as result.WorkerError.flavour, which every `WorkerError(...)` then makes. The public face
stays torch-free: `import notebook_launcher` loads no launch module.
"""

from __future__ import annotations

from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

from . import result

_NO_ERROR_FILE = "<N/A>"  # torch's own placeholder: our traceback comes through the pipe, not a file


class WorkerError(result.WorkerError, ChildFailedError):
    """The WorkerError every launch raises (named so in the cell); also a ChildFailedError with
    torch's `.name` and `.failures` ({rank: ProcessFailure}) for code that reads them."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.name = "notebook_launcher"
        self.failures = {f.rank: _process_failure(f) for f in (self.failure, *self.others)}


def _process_failure(failure: result.RankFailure) -> ProcessFailure:
    """torch's record of one failed rank, its message the worker's traceback (or our summary)."""
    code = failure.exitcode if failure.exitcode is not None else 1
    record = ProcessFailure(local_rank=failure.rank, pid=-1, exitcode=code, error_file=_NO_ERROR_FILE)
    record.message = {
        "message": failure.summary(),
        "extraInfo": {"py_callstack": failure.traceback or failure.summary(), "timestamp": record.timestamp},
    }
    return record


result.WorkerError.flavour = WorkerError
