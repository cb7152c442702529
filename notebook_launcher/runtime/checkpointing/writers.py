"""Where save_state's files go: written at once (the synchronous save), or staged now and written
later by the checkpoint's background thread (save_state(async_save=True), async_save.py).

Staging copies every tensor into a CPU buffer (pinned when the source is on a GPU) so training may
change its weights and optimizer state as soon as save_state returns. The buffers are kept and
reused by the next save when the shapes and dtypes match, so after the first save no new host
memory is taken: the added peak is one copy of the state this rank writes. Tensors that share
storage (tied weights) stay shared in the staged copy, so the files are those of a synchronous save.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import torch

# ---------------------------------------------------------------------------------- the protocol


class FileWriter(Protocol):
    """What checkpoint.save_state and a strategy's save_training_state write through."""

    deferred: bool  # True: the files exist only after the background write

    def torch_save(self, obj: Any, path: Path) -> None: ...
    def safetensors_save(
        self, state: dict[str, torch.Tensor], path: Path, metadata: dict[str, str]
    ) -> None: ...
    def text(self, path: Path, text: str) -> None: ...
    def dcp_save(self, state: dict[str, Any], path: Path) -> None: ...


class ImmediateWriter:
    """The synchronous save: every file is written before the call returns."""

    deferred = False

    def torch_save(self, obj: Any, path: Path) -> None:
        torch.save(obj, path)

    def safetensors_save(self, state: dict[str, torch.Tensor], path: Path, metadata: dict[str, str]) -> None:
        from safetensors.torch import save_file

        save_file(state, str(path), metadata=metadata)

    def text(self, path: Path, text: str) -> None:
        path.write_text(text)

    def dcp_save(self, state: dict[str, Any], path: Path) -> None:
        import torch.distributed.checkpoint as dcp

        dcp.save(state, checkpoint_id=str(path))


# -------------------------------------------------------------------------------------- staging


class StagingBuffers:
    """CPU copies of the last save's tensors, by file and key, reused while shapes and dtypes match."""

    def __init__(self) -> None:
        self._by_key: dict[tuple[str, ...], torch.Tensor] = {}
        self.copied_bytes = 0  # of the last stage() calls since reset_count()
        self.allocated_bytes = 0  # buffers made (not reused) since this object was made

    def reset_count(self) -> None:
        self.copied_bytes = 0

    def buffer_for(self, key: tuple[str, ...], source: torch.Tensor) -> torch.Tensor:
        held = self._by_key.get(key)
        if held is not None and held.shape == source.shape and held.dtype == source.dtype:
            return held
        pin = source.is_cuda and torch.cuda.is_available()
        made = torch.empty(source.shape, dtype=source.dtype, device="cpu", pin_memory=pin)
        self._by_key[key] = made
        self.allocated_bytes += made.numel() * made.element_size()
        return made

    def held_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self._by_key.values())


def stage(obj: Any, buffers: StagingBuffers, key: tuple[str, ...]) -> Any:
    """A copy of obj whose tensors live in staging buffers and whose other leaves are deep copies."""
    shared: dict[tuple[Any, ...], torch.Tensor] = {}
    staged = _stage(obj, buffers, key, shared)
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()  # the non_blocking copies into pinned buffers are done
    return staged


def _stage(obj: Any, buffers: StagingBuffers, key: tuple[str, ...], shared: dict) -> Any:
    from torch.distributed.tensor import DTensor

    if isinstance(obj, DTensor):
        local = _stage_tensor(obj.to_local(), buffers, key, shared)
        # as torch's own staging (DTensor.to("cpu")): the same spec over a CPU local tensor;
        # from_local would move the buffer back to the mesh's device
        return DTensor(local, obj._spec, requires_grad=False)
    if isinstance(obj, torch.Tensor):
        return _stage_tensor(obj, buffers, key, shared)
    if isinstance(obj, dict):
        items = [(k, _stage(v, buffers, (*key, str(k)), shared)) for k, v in obj.items()]
        return type(obj)(items) if type(obj) in (dict, _ordered_dict()) else dict(items)
    if isinstance(obj, (list, tuple)) and type(obj) in (list, tuple):
        return type(obj)(_stage(v, buffers, (*key, str(i)), shared) for i, v in enumerate(obj))
    return copy.deepcopy(obj)


def _stage_tensor(
    tensor: torch.Tensor, buffers: StagingBuffers, key: tuple[str, ...], shared: dict
) -> torch.Tensor:
    source = tensor.detach()
    identity = (
        source.untyped_storage().data_ptr(),
        source.storage_offset(),
        tuple(source.shape),
        source.stride(),
        source.dtype,
    )
    if identity in shared and source.numel():
        return shared[identity]  # tied weights: one staged tensor, as one stored tensor
    buffer = buffers.buffer_for(key, source)
    buffer.copy_(source, non_blocking=source.is_cuda)
    buffers.copied_bytes += buffer.numel() * buffer.element_size()
    shared[identity] = buffer
    return buffer


def _ordered_dict() -> type:
    from collections import OrderedDict

    return OrderedDict


# ------------------------------------------------------------------------------- deferred writes


class StagedWriter:
    """The asynchronous save: each call stages its data now and keeps the write for write_all()."""

    deferred = True

    def __init__(self, buffers: StagingBuffers, group: Any) -> None:
        self.buffers = buffers
        self.group = group  # the checkpoint's own process group (DCP's planning runs on it)
        self.writes: list[tuple[Path, Callable[[], object]]] = []
        self.started = 0  # how many of the writes have begun (the progress counts their files)

    def _key(self, path: Path) -> tuple[str, ...]:
        return (path.name,)

    def torch_save(self, obj: Any, path: Path) -> None:
        staged = stage(obj, self.buffers, self._key(path))
        self.writes.append((path, lambda: torch.save(staged, path)))

    def safetensors_save(self, state: dict[str, torch.Tensor], path: Path, metadata: dict[str, str]) -> None:
        from safetensors.torch import save_file

        staged = stage(state, self.buffers, self._key(path))
        self.writes.append((path, lambda: save_file(staged, str(path), metadata=metadata)))

    def text(self, path: Path, text: str) -> None:
        self.writes.append((path, lambda: path.write_text(text)))

    def dcp_save(self, state: dict[str, Any], path: Path) -> None:
        import torch.distributed.checkpoint as dcp

        staged = stage(state, self.buffers, self._key(path))
        group = self.group
        self.writes.append((path, lambda: dcp.save(staged, checkpoint_id=str(path), process_group=group)))

    def write_all(
        self,
        before_each: Callable[[int, Path], None] | None = None,
        after_each: Callable[[], None] | None = None,
    ) -> None:
        """Run the kept writes in order (the background thread); before_each(i, path) is the tests'
        seam to stop a rank at a chosen moment of the write; after_each() reports the progress."""
        for index, (path, write) in enumerate(self.writes):
            if before_each is not None:
                before_each(index, path)
            self.started = index + 1
            write()
            if after_each is not None:
                after_each()

    def bytes_on_disk(self) -> int:
        """The sizes of the files written so far, the one being written included (a DCP folder: its
        files)."""
        total = 0
        for path, _ in self.writes[: self.started]:
            if path.is_dir():
                total += sum(entry.stat().st_size for entry in os.scandir(path) if entry.is_file())
            elif path.exists():
                total += path.stat().st_size
        return total
