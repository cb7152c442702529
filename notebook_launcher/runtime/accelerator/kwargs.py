"""Kwargs handlers with Accelerate's names: tweak DDP, the fp16 grad scaler, autocast, the group, the
profiler."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from ...config.enums import DDPCommunicationHookType


class KwargsHandler:
    """Base: `to_kwargs()` returns only the fields the user changed from their defaults."""

    __dataclass_fields__: ClassVar[dict[str, Any]]  # declared only: every subclass is a dataclass

    def to_kwargs(self) -> dict[str, Any]:
        default = type(self)()
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if getattr(self, f.name) != getattr(default, f.name)
        }


@dataclass
class DistributedDataParallelKwargs(KwargsHandler):
    dim: int = 0
    broadcast_buffers: bool = True
    bucket_cap_mb: int = 25
    find_unused_parameters: bool = False
    check_reduction: bool = False
    gradient_as_bucket_view: bool = False
    static_graph: bool = False
    # registered on the DDP model by prepare() (runtime/strategies/comm_hooks.py), not DDP arguments
    comm_hook: DDPCommunicationHookType = DDPCommunicationHookType.NO
    comm_wrapper: DDPCommunicationHookType = DDPCommunicationHookType.NO
    comm_state_option: dict = field(default_factory=dict)


@dataclass
class GradScalerKwargs(KwargsHandler):
    init_scale: float = 65536.0
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000
    enabled: bool = True


@dataclass
class AutocastKwargs(KwargsHandler):
    enabled: bool = True
    cache_enabled: bool | None = None


@dataclass
class InitProcessGroupKwargs(KwargsHandler):
    backend: str | None = None
    init_method: str | None = None
    timeout: datetime.timedelta | None = None


_PROFILER_ACTIVITIES = ("cpu", "cuda", "xpu", "mtia", "hpu")


@dataclass
class ProfileKwargs(KwargsHandler):
    """torch.profiler settings for `accelerator.profile()` (Accelerate's names and meanings).

    activities: "cpu", "cuda", ... (None: torch's default). schedule_option: torch.profiler.schedule
    arguments (wait, warmup, active, repeat, skip_first). on_trace_ready: called when a scheduled
    window is recorded. output_trace_dir: each process writes `profile_{rank}.json` (Chrome trace).
    """

    activities: list[str] | None = None
    schedule_option: dict[str, int] | None = None
    on_trace_ready: Any = None
    record_shapes: bool = False
    profile_memory: bool = False
    with_stack: bool = False
    with_flops: bool = False
    with_modules: bool = False
    output_trace_dir: str | None = None

    def __post_init__(self) -> None:
        for activity in self.activities or []:
            if activity not in _PROFILER_ACTIVITIES:
                from ...errors import ConfigError

                raise ConfigError(
                    f"ProfileKwargs(activities=[..., {activity!r}]) is not a profiler activity; use "
                    f"{', '.join(repr(a) for a in _PROFILER_ACTIVITIES)}."
                )

    def build(self) -> Any:
        """The torch.profiler.profile these settings describe (not yet started)."""
        import torch

        activities = None
        if self.activities is not None:
            activities = [getattr(torch.profiler.ProfilerActivity, a.upper()) for a in self.activities]
        schedule = torch.profiler.schedule(**self.schedule_option) if self.schedule_option else None
        passed = (
            "on_trace_ready",
            "record_shapes",
            "profile_memory",
            "with_stack",
            "with_flops",
            "with_modules",
        )
        options = {name: getattr(self, name) for name in passed}
        return torch.profiler.profile(activities=activities, schedule=schedule, **options)
