"""find_executable_batch_size and release_memory, with Accelerate 1.x's semantics.

Which errors mean "too big": a RuntimeError (torch.OutOfMemoryError is one) whose only argument
contains one of Accelerate's out-of-memory messages (CUDA/XPU, MPS, the CPU allocator, HPU, or
cuDNN's NOT_SUPPORTED). Any other error propagates at once. After each such error the batch size
is multiplied by 0.9 (int), or set by reduce_batch_size_fn(); at 0 the search stops with a
RuntimeError. The decorator remembers the size that worked for its next calls.
"""

from __future__ import annotations

import functools
import gc
import inspect
from collections.abc import Callable
from typing import Any

from .memory_phases import phase_ended

_OOM_MESSAGES = (
    " out of memory.",  # CUDA, HIP, XPU
    "MPS backend out of memory",
    "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED.",
    "DefaultCPUAllocator: can't allocate memory",
    "FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed",  # HPU
)


def should_reduce_batch_size(exception: BaseException) -> bool:
    """True for the out-of-memory errors find_executable_batch_size retries with a smaller batch."""
    if isinstance(exception, RuntimeError) and len(exception.args) == 1:
        return any(message in str(exception.args[0]) for message in _OOM_MESSAGES)
    return False


def clear_device_cache(garbage_collection: bool = False) -> None:
    """Run the garbage collector (optionally) and empty the GPU allocator's cache when CUDA is in use."""
    if garbage_collection:
        gc.collect()
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def release_memory(*objects: Any) -> list[None]:
    """Drop the references, collect garbage, empty the device cache. Use: `a, b = release_memory(a, b)`."""
    count = len(objects)
    del objects  # this frame's references go before the collection
    clear_device_cache(garbage_collection=True)
    phase_ended()  # and the host heap's free pages go back to the system
    return [None] * count


def find_executable_batch_size(
    function: Callable[..., Any] | None = None,
    starting_batch_size: int = 128,
    reduce_batch_size_fn: Callable[[], int] | None = None,
) -> Any:
    """Decorator: call function(batch_size, *args, **kwargs), shrinking batch_size after each
    out-of-memory error until it runs. The function takes batch_size as its first parameter and
    the caller does not pass it."""
    if function is None:
        return functools.partial(
            find_executable_batch_size,
            starting_batch_size=starting_batch_size,
            reduce_batch_size_fn=reduce_batch_size_fn,
        )
    batch_size = starting_batch_size
    if reduce_batch_size_fn is None:

        def reduce_batch_size_fn() -> int:
            return int(batch_size * 0.9)

    @functools.wraps(function)
    def decorator(*args: Any, **kwargs: Any) -> Any:
        nonlocal batch_size
        clear_device_cache(garbage_collection=True)
        params = list(inspect.signature(function).parameters)
        if len(params) < len(args) + 1:
            given = ", ".join(f"{name}={value!r}" for name, value in zip(params[1:], args[1:], strict=False))
            raise TypeError(
                f"Batch size was passed into `{function.__name__}` as the first argument when called. Remove it, "
                f"the decorator passes it: `{function.__name__}({given})`"
            )
        while True:
            if batch_size == 0:
                raise RuntimeError("No executable batch size found, reached zero.")
            try:
                return function(batch_size, *args, **kwargs)
            except Exception as error:
                if not should_reduce_batch_size(error):
                    raise
                clear_device_cache(garbage_collection=True)
                batch_size = reduce_batch_size_fn()

    return decorator
