"""PartialState and AcceleratorState: Accelerate's process-wide state objects, over our ProcessState.

`PartialState()` works without an Accelerator (a script under torchrun, or inside notebook_launch):
it joins the process group described by the environment and offers the process helpers
(split_between_processes, main_process_first, on_main_process, wait_for_everyone, print, ...).
`AcceleratorState()` adds what the run is configured with (distributed_type, mixed_precision,
plugins); once an Accelerator exists it returns that Accelerator's state, as in Accelerate.
"""

from __future__ import annotations

from typing import Any

from ...config import LaunchConfig, config_from_env
from ...config.enums import DistributedType
from ...errors import AcceleratorError
from ..accelerator.process_api import ProcessAPI
from ..data.gradient_state import GradientState
from .state import ProcessState, current_state, get_state, on_reset, reset_state


def resolve_distributed_type(config: LaunchConfig, process: ProcessState) -> DistributedType:
    """FSDP/DeepSpeed when configured, else how the processes are spread (none, CPUs, GPUs)."""
    if config.distributed_type in ("FSDP", "DEEPSPEED"):
        return DistributedType(config.distributed_type)
    if not process.is_distributed:
        return DistributedType.NO
    if config.distributed_type == "NO":
        raise AcceleratorError(
            f"The launch config says distributed_type='NO' (one process), but this process is one of "
            f"{process.world_size} (WORLD_SIZE); launch one process, or use MULTI_GPU / MULTI_CPU for several."
        )
    return DistributedType.MULTI_GPU if process.device.type == "cuda" else DistributedType.MULTI_CPU


class PartialState(ProcessAPI):
    """Rank, world, device and the process helpers, without any training configuration."""

    _shared_state: dict[str, Any] = {}

    def __init__(self, cpu: bool = False, **kwargs: Any) -> None:
        config = config_from_env() or LaunchConfig()
        self._process = get_state(config, cpu=cpu, timeout=kwargs.get("timeout"))
        self._debug = config.debug
        PartialState._shared_state["process"] = self._process

    @property
    def state(self) -> ProcessState:  # what ProcessAPI's helpers read
        return self._process

    @property
    def initialized(self) -> bool:
        return current_state() is not None

    @property
    def distributed_type(self) -> DistributedType:
        if not self._process.is_distributed:
            return DistributedType.NO
        return DistributedType.MULTI_GPU if self._process.device.type == "cuda" else DistributedType.MULTI_CPU

    @property
    def backend(self) -> str | None:
        return self._process.backend

    @property
    def debug(self) -> bool:
        return self._debug

    @debug.setter
    def debug(self, on: bool) -> None:
        """Collectives check that every rank passes matching shapes (Accelerate's debug mode)."""
        from . import debug_mode

        self._debug = bool(on)
        debug_mode.switch(on)

    @property
    def fork_launched(self) -> bool:
        return False

    def destroy_process_group(self, group: Any = None) -> None:
        """Tear down the process group this process created and forget the state."""
        reset_state(destroy_process_group=True)

    @staticmethod
    def _reset_state() -> None:
        PartialState._shared_state.clear()
        reset_state(destroy_process_group=False)

    def __repr__(self) -> str:
        return (
            f"Distributed environment: {self.distributed_type}"
            f"{('  Backend: ' + self.backend) if self.backend else ''}\n"
            f"Num processes: {self.num_processes}\nProcess index: {self.process_index}\n"
            f"Local process index: {self.local_process_index}\nDevice: {self.device}\n"
        )


class AcceleratorState(PartialState):
    """PartialState plus the run's configuration (Accelerate's names): distributed_type,
    mixed_precision, dynamo/FSDP/DeepSpeed plugins. Our ProcessState's own fields (rank,
    world_size, local_rank, ...) are readable on it too."""

    _shared_state: dict[str, Any] = {}

    def __init__(self, mixed_precision: str | None = None, cpu: bool = False, **kwargs: Any) -> None:
        shared = AcceleratorState._shared_state
        if shared:
            self.__dict__ = shared  # one state: _reset_state() empties every instance, as in Accelerate
            return
        config = (config_from_env() or LaunchConfig()).replace(mixed_precision=mixed_precision)
        super().__init__(cpu=cpu or config.use_cpu, **kwargs)
        self._config = config
        self._distributed_type = resolve_distributed_type(config, self._process)
        self.plugins: dict[str, Any] = {}

    @classmethod
    def for_accelerator(
        cls,
        process: ProcessState,
        config: LaunchConfig,
        distributed_type: DistributedType,
        plugins: dict[str, Any],
    ) -> AcceleratorState:
        """The state an Accelerator was built with; later `AcceleratorState()` calls return it."""
        state = cls.__new__(cls)
        state.__dict__.update(
            _process=process,
            _debug=config.debug,
            _config=config,
            _distributed_type=distributed_type,
            plugins=plugins,
        )
        AcceleratorState._shared_state.clear()
        AcceleratorState._shared_state.update(state.__dict__)
        state.__dict__ = AcceleratorState._shared_state
        PartialState._shared_state["process"] = process
        return state

    @property
    def distributed_type(self) -> DistributedType:
        return self._distributed_type

    @distributed_type.setter
    def distributed_type(self, value: DistributedType) -> None:
        """Settable, as in Accelerate (its own tests switch it to check a code path)."""
        self._distributed_type = DistributedType(value)

    @property
    def mixed_precision(self) -> str:
        return self._config.mixed_precision

    @property
    def dynamo_plugin(self) -> Any:
        return self.plugins.get("dynamo")

    @property
    def fsdp_plugin(self) -> Any:
        return self.plugins.get("fsdp")

    @property
    def deepspeed_plugin(self) -> Any:
        return self.plugins.get("deepspeed")

    @property
    def is_fsdp2(self) -> bool:
        return self._distributed_type == DistributedType.FSDP and self._config.fsdp_config.fsdp_version == 2

    @staticmethod
    def _reset_state(reset_partial_state: bool = False) -> None:
        AcceleratorState._shared_state.clear()
        if reset_partial_state:
            PartialState._reset_state()

    def __getattr__(self, name: str) -> Any:
        process = self.__dict__.get("_process")
        if process is not None and not name.startswith("_") and hasattr(process, name):
            return getattr(process, name)
        if process is None:
            raise AttributeError(
                f"`AcceleratorState` object has no attribute `{name}`. This happens if "
                "`AcceleratorState._reset_state()` was called and an `Accelerator` or `PartialState` was "
                "not reinitialized; create a new Accelerator after resetting the state."
            )
        raise AttributeError(f"'AcceleratorState' object has no attribute {name!r}")


def is_initialized() -> bool:
    """Whether an Accelerator (or AcceleratorState) has set up this process's state (Accelerate's helper)."""
    return bool(AcceleratorState._shared_state)


def _forget_shared_state() -> None:
    """What reset_state() also clears: the shared AcceleratorState, PartialState and GradientState."""
    GradientState._reset_state()
    AcceleratorState._shared_state.clear()
    PartialState._shared_state.clear()


on_reset(_forget_shared_state)
