"""LaunchConfig: everything a run is launched with, validated in one place.

It is a plain dataclass tree with no torch import, so it can be built, saved and shipped to
workers (through the environment) before anything touches a GPU.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError, bad_value, closest
from .accelerate_keys import ACCELERATE_ONLY_KEYS, check_accelerate_key
from .cluster import ClusterConfig
from .enums import RUNNABLE_DISTRIBUTED_TYPES, PrecisionType
from .parallelism import check_section, from_section
from .sections import DeepSpeedConfig, DynamoConfig, FSDPConfig, check_strategy_sections

DISTRIBUTED_TYPES = tuple(t.value for t in RUNNABLE_DISTRIBUTED_TYPES)
MIXED_PRECISIONS = tuple(p.value for p in PrecisionType)
RDZV_BACKENDS = ("static", "c10d")


@dataclass
class LaunchConfig:
    """What a run uses: processes, machines, strategy, precision. Keys match Accelerate's YAML."""

    num_processes: int | None = None
    num_machines: int = 1
    machine_rank: int = 0
    main_process_ip: str | None = None
    main_process_port: int | None = None
    rdzv_backend: str = "static"
    distributed_type: str | None = None
    mixed_precision: str = "no"
    gradient_accumulation_steps: int = 1
    use_cpu: bool = False
    debug: bool = False
    seed: int | None = None
    gpu_ids: str | None = None
    max_restarts: int = 0
    monitor_interval: float = 0.1
    stall_timeout: float | None = 300.0  # seconds without progress before a hang report; None/0: off
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)
    deepspeed_config: DeepSpeedConfig = field(default_factory=DeepSpeedConfig)
    dynamo_config: DynamoConfig = field(default_factory=DynamoConfig)
    cluster_config: ClusterConfig = field(default_factory=ClusterConfig)
    parallelism_config: dict = field(default_factory=dict)  # Accelerate's section and keys

    def __post_init__(self) -> None:
        for name, cls in _SECTIONS.items():
            value = getattr(self, name)
            if value is None:
                setattr(self, name, cls())
            elif isinstance(value, dict):
                setattr(self, name, _section_from_dict(cls, value, name))
        self.validate()

    @property
    def runs_on_cpu(self) -> bool:
        """CPU processes even on a GPU machine: use_cpu, or distributed_type MULTI_CPU (Accelerate's meaning)."""
        return bool(self.use_cpu) or self.distributed_type == "MULTI_CPU"

    # ---------------------------------------------------------------- validation
    def validate(self) -> LaunchConfig:
        """Check and normalise every field; raise ConfigError naming the first bad one."""
        # YAML 1.1 (PyYAML) reads an unquoted NO / no as false: a hand-written `distributed_type: NO`
        # or `mixed_precision: no` means the string, as Accelerate's own (quoted) files say.
        if self.distributed_type is False:
            self.distributed_type = "NO"
        if self.mixed_precision is False:
            self.mixed_precision = "no"
        _coerce_types(self)
        if self.num_processes is not None and self.num_processes < 1:
            raise ConfigError(
                f"num_processes={self.num_processes!r} must be at least 1 "
                "(it is the total number of processes over all machines)."
            )
        if self.num_machines < 1:
            raise ConfigError(f"num_machines={self.num_machines!r} must be at least 1.")
        if not 0 <= self.machine_rank < self.num_machines:
            raise ConfigError(
                f"machine_rank={self.machine_rank!r} must be between 0 and num_machines-1 "
                f"({self.num_machines - 1})."
            )
        if self.num_processes is not None and self.num_processes % self.num_machines:
            raise ConfigError(
                f"num_processes={self.num_processes} is the total over all machines and must be divisible "
                f"by num_machines={self.num_machines}."
            )
        if self.main_process_port is not None and not 0 <= self.main_process_port <= 65535:
            raise ConfigError(f"main_process_port={self.main_process_port!r} must be between 0 and 65535.")
        if self.rdzv_backend not in RDZV_BACKENDS:
            raise bad_value("rdzv_backend", self.rdzv_backend, RDZV_BACKENDS)
        if self.distributed_type is not None:
            self.distributed_type = str(self.distributed_type).upper()
            if self.distributed_type not in DISTRIBUTED_TYPES:
                raise bad_value("distributed_type", self.distributed_type, DISTRIBUTED_TYPES)
        self.mixed_precision = str(self.mixed_precision).lower()
        if self.mixed_precision not in MIXED_PRECISIONS:
            raise bad_value("mixed_precision", self.mixed_precision, MIXED_PRECISIONS)
        if self.gradient_accumulation_steps < 1:
            raise ConfigError(
                f"gradient_accumulation_steps={self.gradient_accumulation_steps!r} must be at least 1 "
                "(1 means: step the optimizer every batch)."
            )
        if self.max_restarts < 0:
            raise ConfigError(f"max_restarts={self.max_restarts!r} must be >= 0.")
        if self.monitor_interval <= 0:
            raise ConfigError(f"monitor_interval={self.monitor_interval!r} must be > 0 seconds.")
        if self.stall_timeout is not None and self.stall_timeout < 0:
            raise ConfigError(
                f"stall_timeout={self.stall_timeout!r} must be a number of seconds >= 0 (0 or None: no hang report)."
            )
        for name in _SECTIONS:
            _coerce_types(getattr(self, name), f"{name}.")
            getattr(self, name).validate()
        check_strategy_sections(self.distributed_type, self.deepspeed_config, self.num_machines)
        self.parallelism_config = check_section(self.parallelism_config)
        if self.parallelism_config and self.num_processes is not None:
            from_section(self.parallelism_config).check_world_size(self.num_processes)
        return self

    # ------------------------------------------------------------ conversions
    def to_dict(self) -> dict[str, Any]:
        """A plain dict with Accelerate's keys (JSON/YAML friendly)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "config") -> LaunchConfig:
        """Build from Accelerate-style keys; unknown keys are an error naming the closest valid key."""
        if not isinstance(data, dict):
            raise ConfigError(f"{source} must be a mapping of keys to values, got {type(data).__name__}.")
        known = {f.name for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in data.items():
            if key in known:
                kwargs[key] = value
            elif key in ACCELERATE_ONLY_KEYS:
                check_accelerate_key(key, value, source)
            else:
                hint = (
                    closest(key, sorted(known | ACCELERATE_ONLY_KEYS))
                    or f" Valid keys: {', '.join(sorted(known))}."
                )
                raise ConfigError(f"Unknown key {key!r} in {source}.{hint}")
        return cls(**kwargs)

    def replace(self, **overrides: Any) -> LaunchConfig:
        """A copy with the given fields changed (None values are ignored: 'not given')."""
        data = self.to_dict()
        for key, value in overrides.items():
            if value is None:
                continue
            if (key in _SECTIONS or key == "parallelism_config") and isinstance(value, dict):
                data[key] = {**data[key], **value}
            else:
                data[key] = value
        return LaunchConfig.from_dict(data, source="arguments")


_SECTIONS: dict[str, type] = {
    "cluster_config": ClusterConfig,
    "fsdp_config": FSDPConfig,
    "deepspeed_config": DeepSpeedConfig,
    "dynamo_config": DynamoConfig,
}


def _section_from_dict(cls: type, data: dict[str, Any], section: str) -> Any:
    known = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in known:
            raise ConfigError(f"Unknown key {key!r} in {section}.{closest(key, sorted(known))}")
    return cls(**data)


_BOOL_STRINGS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    """A class's resolved annotations, once (resolving them is most of a config's validation time)."""
    return typing.get_type_hints(cls)


def _coerce_types(obj: Any, prefix: str = "") -> None:
    """Turn YAML/CLI strings into the declared field types, or raise naming the field."""
    obj_type: type = type(obj)
    hints = _type_hints(obj_type)
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        target = hints[f.name]
        if dataclasses.is_dataclass(value) or value is None:
            continue
        base = _base_type(target)
        if base is None:
            continue
        try:
            setattr(obj, f.name, _coerce(value, base))
        except (TypeError, ValueError):
            raise ConfigError(
                f"{prefix}{f.name}={value!r} has the wrong type; expected {base.__name__}."
            ) from None


def _base_type(annotation: Any) -> type | None:
    args = typing.get_args(annotation)
    candidates = [a for a in args if a is not type(None)] if args else [annotation]
    for candidate in candidates:
        if candidate in (bool, int, float, str):
            return candidate
    return None


def _coerce(value: Any, base: type) -> Any:
    if base is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in _BOOL_STRINGS:
            return _BOOL_STRINGS[value.lower()]
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        raise ValueError(value)
    if base is int:
        if isinstance(value, bool):
            raise TypeError(value)
        if isinstance(value, float) and not value.is_integer():
            raise ValueError(value)
        return int(value)
    if base is float:
        if isinstance(value, bool):
            raise TypeError(value)
        return float(value)
    if base is str:
        if isinstance(value, dict):
            raise TypeError(value)
        if isinstance(value, (list, tuple)):
            return ",".join(str(v) for v in value)
        return str(value)
    return value
