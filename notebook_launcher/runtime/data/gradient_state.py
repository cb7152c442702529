"""GradientState: where the run is in gradient accumulation and in the data, shared by the Accelerator,
its prepared loaders, optimizers and schedulers.

As in Accelerate it is one shared state per process: `GradientState()` anywhere returns a view of
the same values, so user code can ask `GradientState().end_of_dataloader`. end_of_dataloader and
remainder describe the loader being iterated right now (the innermost one when loops nest).
"""

from __future__ import annotations

import weakref
from typing import Any


class GradientState:
    """sync_gradients, num_steps, end_of_dataloader, remainder (Accelerate's names and meanings).

    remainder: while a loader of known length is iterated without drop_last, the number of samples
    in its last round (len(dataset) % total batch size; 0 when it divides), so gather_for_metrics
    can drop what even_batches repeated; -1 when unknown or outside a loader.
    """

    _shared_state: dict[str, Any] = {}

    def __init__(self, gradient_accumulation_plugin: Any = None) -> None:
        self.__dict__ = self._shared_state
        if not self._shared_state:
            self.sync_gradients = True
            self.plugin_kwargs = {}
            self._loader_refs: list[weakref.ref] = []
        if gradient_accumulation_plugin is not None:
            self.plugin_kwargs = gradient_accumulation_plugin.to_kwargs()

    @property
    def initialized(self) -> bool:
        return bool(self._shared_state)

    # ------------------------------------------------------------- accumulation
    @property
    def plugin_kwargs(self) -> dict[str, Any]:
        return self.__dict__.get("_plugin_kwargs", {})

    @plugin_kwargs.setter
    def plugin_kwargs(self, value: dict[str, Any]) -> None:
        self._plugin_kwargs = dict(value)

    @property
    def num_steps(self) -> int:
        return int(self.plugin_kwargs.get("num_steps") or 1)

    @num_steps.setter
    def num_steps(self, steps: int) -> None:
        self.plugin_kwargs = {**self.plugin_kwargs, "num_steps": int(steps)}

    @property
    def adjust_scheduler(self) -> bool:
        return bool(self.plugin_kwargs.get("adjust_scheduler", True))

    @property
    def sync_with_dataloader(self) -> bool:
        return bool(self.plugin_kwargs.get("sync_with_dataloader", True))

    @property
    def sync_each_batch(self) -> bool:
        return bool(self.plugin_kwargs.get("sync_each_batch", False))

    # ------------------------------------------------------------------ loaders
    @property
    def dataloader_references(self) -> list[Any]:
        return [ref() for ref in self._refs() if ref() is not None]

    @property
    def active_dataloader(self) -> Any:
        loaders = self.dataloader_references
        return loaders[-1] if loaders else None

    @property
    def in_dataloader(self) -> bool:
        return self.active_dataloader is not None

    @property
    def end_of_dataloader(self) -> bool:
        loader = self.active_dataloader
        return bool(loader is not None and loader.end_of_dataloader)

    @property
    def remainder(self) -> int:
        loader = self.active_dataloader
        return -1 if loader is None else int(loader.remainder)

    def _refs(self) -> list[weakref.ref]:
        # .get: a loop still running when the state was reset (end_training inside it) finds none
        return self.__dict__.get("_loader_refs", [])

    def _add_dataloader(self, loader: Any) -> None:
        self._loader_refs = [*self._refs(), weakref.ref(loader)]

    def _remove_dataloader(self, loader: Any) -> None:
        self._loader_refs = [ref for ref in self._refs() if ref() is not None and ref() is not loader]

    def __repr__(self) -> str:
        return (
            f"Sync Gradients: {self.sync_gradients}\nAt end of current dataloader: {self.end_of_dataloader}\n"
            f"Extra samples added: {self.remainder}\nGradient accumulation plugin: {self.plugin_kwargs}\n"
        )

    @staticmethod
    def _reset_state() -> None:
        GradientState._shared_state.clear()
