"""Reading and writing config files (YAML or JSON, Accelerate's keys) and where they live."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..records.names import CONFIG_FILE_ENV
from .launch_config import LaunchConfig


def default_config_path() -> Path:
    """Where `notebook-launcher config` writes and `notebook_launch` reads by default.

    `$NOTEBOOK_LAUNCHER_CONFIG_FILE` wins; else `$XDG_CONFIG_HOME/notebook_launcher/default_config.yaml`
    (XDG_CONFIG_HOME defaults to ~/.config).
    """
    explicit = os.environ.get(CONFIG_FILE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base).expanduser() / "notebook_launcher" / "default_config.yaml"


def load_config(path: str | os.PathLike[str]) -> LaunchConfig:
    """Load a YAML or JSON config file; every problem is a ConfigError naming the file."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ConfigError(
            f"Config file {str(path)!r} does not exist. Create one with `notebook-launcher config`."
        )
    text = path.read_text()
    data = _parse(text, path)
    if data is None:
        data = {}
    return LaunchConfig.from_dict(data, source=f"config file {str(path)!r}")


def _parse(text: str, path: Path) -> Any:  # what the file holds; from_dict checks it is a mapping
    if path.suffix.lower() == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}."
            ) from None
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{path} is not valid YAML{where}: {problem}.") from None


def save_config(config: LaunchConfig, path: str | os.PathLike[str]) -> Path:
    """Write the config as YAML (or JSON for a .json path), atomically; returns the path."""
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    data = to_file_dict(config)
    if path.suffix.lower() == ".json":
        text = json.dumps(data, indent=2) + "\n"
    else:
        import yaml

        text = yaml.safe_dump(data, sort_keys=False)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def to_file_dict(config: LaunchConfig) -> dict[str, object]:
    """The config as a file would hold it: Accelerate's layout, sections only when they apply."""
    data: dict[str, object] = {"compute_environment": "LOCAL_MACHINE"}
    data.update(config.to_dict())
    if config.distributed_type != "FSDP":
        data.pop("fsdp_config")
    if config.distributed_type != "DEEPSPEED":
        data.pop("deepspeed_config")
    if config.cluster_config.cluster_type == "local":
        data.pop("cluster_config")
    if not config.dynamo_config.enabled:
        data.pop("dynamo_config")
    if config.stall_timeout == type(config).__dataclass_fields__["stall_timeout"].default:
        data.pop("stall_timeout")  # our own key: only when set, so Accelerate can read the file too
    return data


def resolve_config(config: LaunchConfig | dict | str | os.PathLike[str] | None) -> LaunchConfig:
    """Turn what a user passed as `config=` into a LaunchConfig.

    None means the default config file when it exists, else all defaults.
    """
    if isinstance(config, LaunchConfig):
        return LaunchConfig.from_dict(config.to_dict())
    if isinstance(config, dict):
        return LaunchConfig.from_dict(config, source="config dict")
    if isinstance(config, (str, os.PathLike)):
        return load_config(config)
    if config is None:
        path = default_config_path()
        return load_config(path) if path.is_file() else LaunchConfig()
    raise ConfigError(
        f"config={config!r} is not usable; pass a LaunchConfig, a dict, or the path of a YAML/JSON file."
    )
