"""The Accelerator's run-control helpers (Accelerate's names): a trigger any process can set to stop
all of them, join for uneven inputs, a gradient sync forced in backward, the profiler, and skipping
batches on resume."""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from .. import ops
from .kwargs import ProfileKwargs

if TYPE_CHECKING:
    from ...config.enums import DistributedType
    from ..data import DataLoaderShard


class ControlAPI:
    """Mixin: needs self.device, self.state, self.distributed_type, self._dataloaders, handlers."""

    flag_tensor: torch.Tensor | None = None
    # declared only: the Accelerator sets them, and its other mixins define the properties below
    handlers: dict[type, Any]
    _dataloaders: list[DataLoaderShard]

    if TYPE_CHECKING:

        @property
        def device(self) -> torch.device: ...
        @property
        def use_distributed(self) -> bool: ...
        @property
        def process_index(self) -> int: ...
        def wait_for_everyone(self) -> None: ...
        @property
        def distributed_type(self) -> DistributedType: ...
        @property
        def even_batches(self) -> bool: ...
        @even_batches.setter
        def even_batches(self, value: bool) -> None: ...

    # --------------------------------------------------------------- trigger
    def set_trigger(self) -> None:
        """Raise this process's flag; the next check_trigger() on every process returns True."""
        self.flag_tensor = torch.tensor(1, device=self.device)

    def check_trigger(self) -> bool:
        """True on every process when any process called set_trigger() since the last check (a
        collective: call it on all processes at the same point). Resets the flag."""
        if self.flag_tensor is None:
            self.flag_tensor = torch.tensor(0, device=self.device)
        raised = ops.reduce(self.flag_tensor, reduction="sum")
        if raised.item() >= 1:
            self.flag_tensor = torch.tensor(0, device=self.device)
            return True
        return False

    # ------------------------------------------------------------- uneven data
    @contextlib.contextmanager
    def join_uneven_inputs(self, joinables: list[Any], even_batches: bool | None = None) -> Iterator[None]:
        """torch's Join over DDP models/optimizers, so processes with fewer batches shadow the collectives
        of the others instead of hanging. even_batches overrides the loaders' setting inside the block
        (their default even_batches=True makes Join unnecessary)."""
        if not (self.use_distributed and self.distributed_type.value in ("MULTI_GPU", "MULTI_CPU")):
            if self.distributed_type.value != "NO":
                warnings.warn(
                    "Joining uneven inputs is only supported for multi-GPU (and multi-CPU) DDP training: "
                    f"join_uneven_inputs has no effect with distributed_type={self.distributed_type.value}.",
                    stacklevel=3,
                )
            yield
            return
        from torch.distributed.algorithms.join import Join

        previous = [(loader, loader.even_batches) for loader in self._dataloaders]
        if even_batches is not None and any(loader.is_iterable for loader in self._dataloaders):
            warnings.warn(
                "Overriding even_batches is only supported for map-style datasets, yet some dataloaders "
                "given were iterable: those keep their setting.",
                stacklevel=3,
            )
            previous = [(loader, value) for loader, value in previous if not loader.is_iterable]
        if even_batches is not None:
            for loader, _ in previous:
                loader.even_batches = even_batches
                loader._plan_cache = None
        effective = self.even_batches if even_batches is None else even_batches
        try:
            with Join(joinables, enable=not effective, throw_on_early_termination=False):
                yield
        finally:
            for loader, value in previous:
                loader.even_batches = value
                loader._plan_cache = None

    @contextlib.contextmanager
    def trigger_sync_in_backward(self, model: torch.nn.Module) -> Iterator[None]:
        """The next backward all-reduces gradients even though the forward ran under no_sync()
        (several forwards under no_sync, then their backwards: sync only at the last). A no-op for
        a model that is not DistributedDataParallel, as in Accelerate."""
        from torch.nn.parallel import DistributedDataParallel

        if not isinstance(model, DistributedDataParallel):
            yield
            return
        previous = model.require_backward_grad_sync, model.require_forward_param_sync
        model.require_backward_grad_sync = model.require_forward_param_sync = True
        model.reducer.prepare_for_backward([])  # what a synced forward would have done
        try:
            yield
        finally:
            model.require_backward_grad_sync, model.require_forward_param_sync = previous

    # ------------------------------------------------------------- profiling
    @contextlib.contextmanager
    def profile(self, profile_handler: ProfileKwargs | None = None) -> Iterator[Any]:
        """torch.profiler over the block, set up by ProfileKwargs (this call's, else the Accelerator's);
        with output_trace_dir each process writes profile_{process_index}.json."""
        handler = profile_handler or self.handlers.get(ProfileKwargs) or ProfileKwargs()
        with handler.build() as profiler:
            yield profiler
        if handler.output_trace_dir is None:
            return
        os.makedirs(handler.output_trace_dir, exist_ok=True)
        profiler.export_chrome_trace(
            os.path.join(handler.output_trace_dir, f"profile_{self.process_index}.json")
        )
        self.wait_for_everyone()

    # ------------------------------------------------------------- resuming
    def skip_first_batches(self, dataloader: Any, num_batches: int = 0) -> Any:
        """The loader whose next pass starts after `num_batches` batches (to resume mid-epoch)."""
        from ..data import DataLoaderShard

        if isinstance(dataloader, DataLoaderShard):
            return dataloader.skip_first_batches(num_batches)
        return skip_first_batches(dataloader, num_batches)


def skip_first_batches(dataloader: Any, num_batches: int = 0) -> Any:
    """Accelerate's function: a loader that skips its first `num_batches` batches on its next pass.
    A prepared loader is returned ready to skip; a plain DataLoader gets a new one over the same data."""
    from torch.utils.data import DataLoader

    from ..data import DataLoaderShard
    from ..data.loader import FixedBatches

    if isinstance(dataloader, DataLoaderShard):
        return dataloader.skip_first_batches(num_batches)
    if not isinstance(dataloader, DataLoader) or dataloader.batch_sampler is None:
        raise TypeError(
            f"skip_first_batches needs a DataLoader with a batch size; got {type(dataloader).__name__}. "
            "Prepare it with accelerator.prepare() first, or iterate and skip the batches yourself."
        )
    batches = [b for i, b in enumerate(dataloader.batch_sampler) if i >= num_batches]
    kwargs = {
        k: getattr(dataloader, k)
        for k in ("num_workers", "collate_fn", "pin_memory", "timeout", "worker_init_fn")
    }
    return DataLoader(dataloader.dataset, batch_sampler=FixedBatches(batches), **kwargs)
