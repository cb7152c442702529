"""ParallelismConfig: the device mesh of a run (pipeline x data replicas x data shards x context x
tensor), with Accelerate 1.x's fields, defaults and PARALLELISM_CONFIG_* variables, and its YAML
section; pp_size / pp_handler (the pipeline axis, config/pipeline.py) are ours.

No torch here: a config is built, checked against the process count and shipped before anything
touches a device. The mesh itself is built in runtime/parallel/mesh.py.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from ..errors import ConfigError, bad_value
from .pipeline import TorchPipelineParallelConfig, check_pipeline, pipeline_from_section

ENV_PREFIX = "PARALLELISM_CONFIG_"
USE_ENV = "ACCELERATE_USE_PARALLELISM_CONFIG"
MESH_ORDER = ("pp", "dp_replicate", "dp_shard", "cp", "sp", "tp")  # torchtitan's order (pp outermost)
SIZE_FIELDS = ("dp_replicate_size", "dp_shard_size", "tp_size", "cp_size", "sp_size", "pp_size")
CP_BACKENDS = ("torch",)
SP_BACKENDS = ("deepspeed",)
TP_STYLES = (
    "colwise",
    "rowwise",
    "sequence_parallel",
    "replicate",
    # transformers' names for the same torch styles with other input/output layouts
    "colwise_rep",
    "colwise_gather_output",
    "rowwise_rep",
    "embedding_rowwise",
    "local_colwise",
    "local_rowwise",
)


@dataclass
class TorchTensorParallelConfig:
    """How tensor parallelism splits the model (Accelerate's name; `plan` and `parallelize_fn` are ours).

    plan: {"layers.*.attn.q_proj": "colwise", ...}, patterns over module names (`*` is one name
    part); None uses a transformers model's own plan. parallelize_fn(model, mesh) -> model: anything
    a plan cannot say; it gets the whole mesh (index it with mesh["tp"]).
    """

    enable_async_tp: bool = False
    plan: dict[str, str] | None = None
    parallelize_fn: Callable[..., Any] | None = None

    def __post_init__(self) -> None:
        if self.plan is not None and self.parallelize_fn is not None:
            raise ConfigError(
                "TorchTensorParallelConfig got both plan= and parallelize_fn=; pass one (a parallelize_fn "
                "can call torch's parallelize_module with a plan itself)."
            )
        for pattern, style in (self.plan or {}).items():
            if style not in TP_STYLES:
                raise bad_value(f"TorchTensorParallelConfig.plan[{pattern!r}]", style, TP_STYLES)


@dataclass
class TorchContextParallelConfig:
    """Accelerate's context-parallel settings (torch's context_parallel; CUDA with SDPA only)."""

    cp_comm_strategy: str = "allgather"

    def __post_init__(self) -> None:
        if self.cp_comm_strategy not in ("allgather", "alltoall"):
            raise bad_value("cp_comm_strategy", self.cp_comm_strategy, ("allgather", "alltoall"))


@dataclass
class ParallelismConfig:
    """The mesh sizes; unset sizes come from PARALLELISM_CONFIG_*_SIZE, else 1 (Accelerate's defaults).

    pp_size x dp_replicate_size x dp_shard_size x cp_size x tp_size must equal the number of processes:
    dp_shard > 1 is FSDP2 over those ranks, dp_replicate x dp_shard is HSDP, tp > 1 splits layers,
    pp > 1 cuts the model into stages (ours; pp_handler says how).
    """

    dp_replicate_size: int | None = None
    dp_shard_size: int | None = None
    tp_size: int | None = None
    cp_size: int | None = None
    cp_backend: str | None = None
    sp_size: int | None = None
    sp_backend: str | None = None
    tp_handler: TorchTensorParallelConfig | None = None
    cp_handler: TorchContextParallelConfig | None = None
    sp_handler: Any = None
    pp_size: int | None = None
    pp_handler: TorchPipelineParallelConfig | None = None
    device_mesh: Any = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in SIZE_FIELDS:
            if getattr(self, name) is None:
                setattr(self, name, _env_int(name))
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(
                    f"ParallelismConfig {name}={value!r} must be a whole number >= 1 (1 turns that dimension off)."
                )
        if self.cp_backend is None:
            self.cp_backend = os.environ.get(ENV_PREFIX + "CP_BACKEND", "torch")
        if self.sp_backend is None:
            self.sp_backend = os.environ.get(ENV_PREFIX + "SP_BACKEND", "deepspeed")
        if self.cp_backend not in CP_BACKENDS:
            raise bad_value("ParallelismConfig cp_backend", self.cp_backend, CP_BACKENDS)
        if self.sp_backend not in SP_BACKENDS:
            raise bad_value("ParallelismConfig sp_backend", self.sp_backend, SP_BACKENDS)
        if self._size("sp") > 1:
            raise ConfigError(
                f"ParallelismConfig sp_size={self.sp_size}: DeepSpeed's sequence parallelism (ALST/Ulysses) is "
                "not supported; set sp_size=1."
            )
        if self._size("tp") > 1 and self.tp_handler is None:
            self.tp_handler = TorchTensorParallelConfig()
        if self._size("cp") > 1 and self.cp_handler is None:
            self.cp_handler = TorchContextParallelConfig()
        if self.pp_enabled:
            self.pp_handler = check_pipeline(self.pp_handler, self._size)
        if self.tp_enabled and self.dp_replicate_enabled and not self.dp_shard_enabled:
            raise ConfigError(
                f"ParallelismConfig dp_replicate_size={self.dp_replicate_size} with tp_size={self.tp_size} and "
                "dp_shard_size=1: replicas over tensor-parallel layers are HSDP here (as in Accelerate), so "
                f"set dp_shard_size >= 2 (e.g. dp_replicate_size=1, dp_shard_size={self.dp_replicate_size})."
            )

    # ------------------------------------------------------------- Accelerate's views
    @property
    def dp_replicate_enabled(self) -> bool:
        return self._size("dp_replicate") > 1

    @property
    def dp_shard_enabled(self) -> bool:
        return self._size("dp_shard") > 1

    @property
    def tp_enabled(self) -> bool:
        return self._size("tp") > 1

    @property
    def pp_enabled(self) -> bool:
        return self._size("pp") > 1

    @property
    def cp_enabled(self) -> bool:
        return self._size("cp") > 1

    @property
    def sp_enabled(self) -> bool:
        return self._size("sp") > 1

    @property
    def total_size(self) -> int:
        return (
            self._size("pp")
            * self._size("dp_replicate")
            * self._size("dp_shard")
            * self._size("tp")
            * self._size("cp")
            * self._size("sp")
        )

    @property
    def data_parallel_size(self) -> int:
        return self._size("dp_replicate") * self._size("dp_shard")

    @property
    def non_data_parallel_size(self) -> int:
        return self._size("tp") * self._size("cp") * self._size("sp")

    @property
    def dp_dim_names(self) -> list[str]:
        return [n for n in ("dp_replicate", "dp_shard") if self._size(n) > 1]

    @property
    def non_dp_dim_names(self) -> list[str]:
        return [n for n in ("tp", "cp", "sp") if self._size(n) > 1]

    @property
    def dp_shard_cp_dim_names(self) -> list[str]:
        return [n for n in ("dp_shard", "cp") if self._size(n) > 1]

    @property
    def dp_cp_dim_names(self) -> list[str]:
        return [n for n in ("dp_replicate", "dp_shard", "cp") if self._size(n) > 1]

    @property
    def fsdp_dim_names(self) -> list[str]:
        return (["dp_replicate"] if self.dp_replicate_enabled else []) + ["dp_shard_cp"]

    @property
    def active_mesh_dims(self) -> list[str]:
        return (["pp"] if self.pp_enabled else []) + self.dp_dim_names + self.non_dp_dim_names

    def mesh_layout(self) -> tuple[tuple[str, ...], tuple[int, ...]]:
        """(dim names, sizes) of the mesh in Accelerate's order; ((), ()) when nothing is enabled."""
        names = tuple(n for n in MESH_ORDER if n in self.active_mesh_dims)
        return names, tuple(self._size(n) for n in names)

    def _size(self, dim: str) -> int:
        return int(getattr(self, f"{dim}_size"))

    # ------------------------------------------------------------------- checks
    def check_world_size(self, world_size: int) -> None:
        """The sizes' product must be the number of processes (a ConfigError before any collective)."""
        if self.total_size == world_size:
            return
        sizes = ", ".join(f"{n}={getattr(self, n)}" for n in SIZE_FIELDS if n != "sp_size")
        other = self.non_data_parallel_size * self._size("pp")
        if world_size % other == 0:
            hint = (
                f"e.g. dp_shard_size={world_size // other} with tp_size={self.tp_size}, cp_size={self.cp_size}, "
                f"pp_size={self.pp_size}"
            )
        else:
            hint = f"pp_size x tp_size x cp_size={other} does not divide {world_size}; pick sizes that do"
        raise ConfigError(
            f"ParallelismConfig({sizes}) multiplies to {self.total_size}, but the run has world size "
            f"{world_size} (processes over all machines). Make the product of the sizes equal {world_size} "
            f"({hint}), or launch {self.total_size} processes."
        )

    def to_json(self) -> dict[str, Any]:
        """Sizes and backends (the handlers' plain fields too), as Accelerate's to_json."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "device_mesh":
                continue
            if isinstance(value, TorchPipelineParallelConfig):
                value = value.plain_fields()
            if dataclasses.is_dataclass(value):
                value = {k: v for k, v in dataclasses.asdict(cast(Any, value)).items() if not callable(v)}
            out[f.name] = value
        return out


def _env_int(name: str) -> int:
    raw = os.environ.get(ENV_PREFIX + name.upper(), "1")
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(
            f"{ENV_PREFIX}{name.upper()}={raw!r} must be a whole number >= 1 (the ParallelismConfig {name})."
        ) from None


def mesh_coordinates(config: ParallelismConfig, world_size: int) -> list[dict[str, int]]:
    """Every rank's coordinates on the mesh (for pictures of it): {"rank", "dp_replicate", ...}."""
    sizes = [("pp", config._size("pp")), ("dp_replicate", config._size("dp_replicate"))]
    sizes += [("dp_shard", config._size("dp_shard"))]
    sizes += [("cp", config._size("cp")), ("tp", config._size("tp"))]
    rows = []
    for rank in range(world_size):
        coords, rest = {"rank": rank}, rank
        for name, size in reversed(sizes):
            coords[name], rest = rest % size, rest // size
        rows.append(coords)
    return rows


# ------------------------------------------------------------------ the YAML section
_KEY = "parallelism_config_"
SECTION_KEYS = (
    "parallelism_config_dp_replicate_size",
    "parallelism_config_dp_shard_size",
    "parallelism_config_tp_size",
    "parallelism_config_cp_size",
    "parallelism_config_cp_backend",
    "parallelism_config_cp_comm_strategy",
    "parallelism_config_pp_size",  # ours from here: the pipeline axis
    "parallelism_config_pp_schedule",
    "parallelism_config_pp_n_microbatches",
    "parallelism_config_pp_virtual_stages",
    "parallelism_config_pp_split_points",
)
_TEXT_KEYS = ("_backend", "_strategy", "_schedule", "_split_points")


def section_is_set(section: Mapping[str, Any] | None) -> bool:
    """True when a config's parallelism_config section asks for a mesh (Accelerate: a non-empty one)."""
    return bool(section)


def check_section(section: Any) -> dict[str, Any]:
    """Validate a YAML `parallelism_config:` section (Accelerate's keys); returns it cleaned."""
    if section is None or section == {}:
        return {}
    if isinstance(section, ParallelismConfig):
        section = _sizes_only(section)
    if not isinstance(section, Mapping):
        raise ConfigError(
            f"parallelism_config must be a mapping of {', '.join(SECTION_KEYS)}; got {type(section).__name__}."
        )
    from ..errors import closest

    clean: dict[str, Any] = {}
    for key, value in section.items():
        if key not in SECTION_KEYS:
            raise ConfigError(f"Unknown key {key!r} in parallelism_config.{closest(key, SECTION_KEYS)}")
        if value is None:
            continue
        clean[key] = value if key.endswith(_TEXT_KEYS) else _whole(key, value)
    from_section(clean)  # the same checks as ParallelismConfig(...)
    return clean


def _whole(key: str, value: Any) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"parallelism_config.{key}={value!r} must be a whole number >= 1.") from None
    if number < 1 or isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ConfigError(f"parallelism_config.{key}={value!r} must be a whole number >= 1.")
    return number


def from_section(section: Mapping[str, Any]) -> ParallelismConfig:
    """The ParallelismConfig a YAML section (or the CLI's flags) describes; unset sizes are 1."""
    kwargs: dict[str, Any] = {n: int(section.get(_KEY + n, 1)) for n in SIZE_FIELDS if n != "sp_size"}
    kwargs["sp_size"] = 1
    kwargs["cp_backend"] = section.get(_KEY + "cp_backend", "torch")
    strategy = section.get(_KEY + "cp_comm_strategy")
    if strategy is not None and kwargs["cp_size"] > 1:
        kwargs["cp_handler"] = TorchContextParallelConfig(cp_comm_strategy=strategy)
    if kwargs["pp_size"] > 1:
        kwargs["pp_handler"] = pipeline_from_section(section, _KEY)
    return ParallelismConfig(**kwargs)


def _sizes_only(config: ParallelismConfig) -> dict[str, Any]:
    """A ParallelismConfig given to a launcher: its sizes travel to the workers; a plan or a function
    cannot (they belong to the Accelerator inside the function)."""
    handler = config.tp_handler
    if config.pp_handler is not None and config.pp_handler.loss_fn is not None:
        raise ConfigError(
            "A launcher's parallelism_config carries the mesh sizes only; its pp_handler's loss_fn does not "
            "travel to the workers. Give the loss function inside your function (TorchPipelineParallelConfig("
            "loss_fn=...) in Accelerator(parallelism_config=...), or model.step(x, y, loss_fn=...))."
        )
    if handler is not None and (handler.plan is not None or handler.parallelize_fn is not None):
        raise ConfigError(
            "A launcher's parallelism_config carries the mesh sizes only; its tp_handler's plan / parallelize_fn "
            "does not travel to the workers. Build the Accelerator inside your function with "
            "Accelerator(parallelism_config=ParallelismConfig(..., tp_handler=TorchTensorParallelConfig(plan=...))), "
            "and pass only the sizes here."
        )
    return to_section(config)


def to_section(config: ParallelismConfig) -> dict[str, Any]:
    """Accelerate's YAML keys for a ParallelismConfig's sizes (what `accelerate config` writes)."""
    out: dict[str, Any] = {_KEY + n: getattr(config, n) for n in SIZE_FIELDS if n != "sp_size"}
    out[_KEY + "cp_backend"] = config.cp_backend
    if config.pp_enabled and config.pp_handler is not None:
        plain = config.pp_handler.plain_fields()
        out[_KEY + "pp_schedule"] = plain["schedule"]
        for name in ("n_microbatches", "virtual_stages", "split_points"):
            if plain[name] is not None:
                out[_KEY + "pp_" + name] = ",".join(plain[name]) if name == "split_points" else plain[name]
    return out


def to_env(section: Mapping[str, Any]) -> dict[str, str]:
    """The PARALLELISM_CONFIG_* variables `accelerate launch` exports for a section."""
    if not section_is_set(section):
        return {}
    config = from_section(section)
    env = {USE_ENV: "true"}
    for name in SIZE_FIELDS:
        env[ENV_PREFIX + name.upper()] = str(getattr(config, name))
    env[ENV_PREFIX + "CP_BACKEND"] = str(config.cp_backend)
    return env
