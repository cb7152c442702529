"""The Accelerator's process-level helpers: who prints, who goes first, collectives, splitting work.

Kept apart from facade.py so that file stays about training; these need only `self.state`.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from .. import ops
from ..world.state import ProcessState


class ProcessAPI:
    if TYPE_CHECKING:  # read only here: the Accelerator's attribute, PartialState's property

        @property
        def state(self) -> ProcessState: ...

    # ------------------------------------------------------------- identity
    @property
    def device(self) -> torch.device:
        return self.state.device

    @property
    def num_processes(self) -> int:
        return self.state.world_size

    @property
    def process_index(self) -> int:
        return self.state.rank

    @property
    def local_process_index(self) -> int:
        return self.state.local_rank

    @property
    def is_main_process(self) -> bool:
        return self.state.is_main_process

    @property
    def is_local_main_process(self) -> bool:
        return self.state.is_local_main_process

    @property
    def is_last_process(self) -> bool:
        return self.state.is_last_process

    @property
    def use_distributed(self) -> bool:
        return self.state.is_distributed

    # ---------------------------------------------------------- coordination
    def wait_for_everyone(self) -> None:
        """A barrier across all processes (nothing in a single process)."""
        if self.state.is_distributed and dist.is_initialized():
            dist.barrier()

    def print(self, *args: Any, **kwargs: Any) -> None:
        """print() on the local main process only."""
        if self.state.is_local_main_process:
            print(*args, **kwargs)

    @contextlib.contextmanager
    def main_process_first(self) -> Iterator[None]:
        """The main process runs the block first (e.g. to download or cache), then the others."""
        with self._first(self.state.is_main_process):
            yield

    @contextlib.contextmanager
    def local_main_process_first(self) -> Iterator[None]:
        with self._first(self.state.is_local_main_process):
            yield

    @contextlib.contextmanager
    def _first(self, is_first: bool) -> Iterator[None]:
        if not is_first:
            self.wait_for_everyone()
        yield
        if is_first:
            self.wait_for_everyone()

    def on_main_process(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """Decorator: run the function on the main process only (returns None elsewhere)."""
        return self._only_if(lambda: self.state.is_main_process, function)

    def on_local_main_process(self, function: Callable[..., Any]) -> Callable[..., Any]:
        return self._only_if(lambda: self.state.is_local_main_process, function)

    def on_last_process(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """Decorator: run the function on the last process only."""
        return self._only_if(lambda: self.state.is_last_process, function)

    def on_process(self, function: Callable[..., Any] | None = None, process_index: int | None = None):
        """Decorator: run on the process with this global index (`@acc.on_process(process_index=1)`)."""
        if function is None:
            return functools.partial(self.on_process, process_index=process_index)
        index = _index_given("on_process", "process_index", process_index)
        return self._only_if(lambda: self.state.rank == index or not self.state.is_distributed, function)

    def on_local_process(
        self, function: Callable[..., Any] | None = None, local_process_index: int | None = None
    ):
        """Decorator: run on the process with this index on each machine."""
        if function is None:
            return functools.partial(self.on_local_process, local_process_index=local_process_index)
        index = _index_given("on_local_process", "local_process_index", local_process_index)
        return self._only_if(
            lambda: self.state.local_rank == index or not self.state.is_distributed, function
        )

    @staticmethod
    def _only_if(condition: Callable[[], bool], function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return function(*args, **kwargs) if condition() else None

        return wrapper

    @contextlib.contextmanager
    def split_between_processes(self, inputs: Any, apply_padding: bool = False) -> Iterator[Any]:
        """Yield this process's contiguous share of a list, tuple, tensor or dict of those."""
        yield split_for_rank(inputs, self.state.rank, self.state.world_size, apply_padding)

    # ------------------------------------------------------------ collectives
    def gather(self, tensor: Any) -> Any:
        """All ranks' tensors concatenated on dim 0 (uneven first dimensions are fine)."""
        return ops.gather(tensor)

    def gather_object(self, obj: Any) -> list[Any]:
        return ops.gather_object(obj)

    def reduce(self, tensor: Any, reduction: str = "sum", scale: float = 1.0) -> Any:
        return ops.reduce(tensor, reduction=reduction, scale=scale)

    def broadcast(self, tensor: Any, from_process: int = 0) -> Any:
        return ops.broadcast(tensor, from_process)

    def pad_across_processes(
        self, tensor: Any, dim: int = 0, pad_index: int = 0, pad_first: bool = False
    ) -> Any:
        return ops.pad_across_processes(tensor, dim=dim, pad_index=pad_index, pad_first=pad_first)


def _index_given(method: str, name: str, value: int | None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{method} needs {name}=<int>, e.g. @accelerator.{method}({name}=1); got {value!r}.")
    return value


def split_for_rank(inputs: Any, rank: int, world: int, apply_padding: bool = False) -> Any:
    """Contiguous, nearly equal shares: the first len % world ranks get one extra item."""
    if world == 1:
        return inputs
    if isinstance(inputs, dict):
        lengths = {len(v) for v in inputs.values()}
        if len(lengths) > 1:
            raise ValueError(
                f"split_between_processes got a dict whose values have different lengths ({sorted(lengths)}); "
                "all values must have the same number of elements."
            )
        return {k: split_for_rank(v, rank, world, apply_padding) for k, v in inputs.items()}
    length = len(inputs)
    per, extra = divmod(length, world)
    start = rank * per + min(rank, extra)
    end = start + per + (1 if rank < extra else 0)
    share = inputs[start:end]
    if apply_padding and extra and rank >= extra and length:
        last = inputs[-1:]
        share = torch.cat([share, last]) if isinstance(share, torch.Tensor) else share + type(share)(last)
    return share
