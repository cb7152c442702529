"""Model weight files in HuggingFace's layout: `model.safetensors` (or `pytorch_model.bin`), split into
`model-00001-of-0000N.safetensors` shards with a `model.safetensors.index.json` when the weights
exceed max_shard_size, as `Accelerator.save_model` writes them. transformers' `from_pretrained`
and safetensors read these files directly.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ...errors import AcceleratorError

SAFE_WEIGHTS_NAME = "model.safetensors"
WEIGHTS_NAME = "pytorch_model.bin"
SAFE_INDEX_NAME = "model.safetensors.index.json"
WEIGHTS_INDEX_NAME = "pytorch_model.bin.index.json"
_UNITS = {"TB": 10**12, "GB": 10**9, "MB": 10**6, "KB": 10**3}
_SHARD = re.compile(r"(.*?)-\d{5}-of-\d{5}")


def size_in_bytes(size: int | str) -> int:
    """5_000_000 or "5MB" (decimal units TB/GB/MB/KB, like the Hub) -> bytes."""
    if isinstance(size, int) and not isinstance(size, bool):
        return size
    text = str(size).strip()
    unit = text[-2:].upper()
    try:
        return int(float(text[:-2]) * _UNITS[unit])
    except (KeyError, ValueError):
        raise AcceleratorError(
            f"max_shard_size={size!r} is not a size; give bytes (an int) or digits and a unit, e.g. '5GB', '200MB'."
        ) from None


def without_shared_tensors(state_dict: Mapping[str, Any]) -> dict[str, Any]:
    """safetensors refuses two names for one storage (tied weights): keep the first name of each."""
    seen: set[tuple[int, int | torch.SymInt]] = set()
    clean: dict[str, Any] = {}
    for name, tensor in state_dict.items():
        if isinstance(tensor, torch.Tensor):
            key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset())
            if tensor.numel() and key in seen:
                continue
            seen.add(key)
            tensor = tensor.detach().contiguous()
        clean[name] = tensor
    return clean


def plan_shards(
    state_dict: Mapping[str, torch.Tensor], max_shard_size: int, pattern: str
) -> dict[str, list[str]]:
    """File name -> tensor names. Greedy in key order (the Hub's rule): a tensor that does not fit
    starts a new shard; a tensor bigger than the limit gets a shard of its own."""
    shards: list[list[str]] = []
    current: list[str] = []
    current_size = 0
    for name, tensor in state_dict.items():
        size = tensor.numel() * tensor.element_size()
        if size > max_shard_size:
            shards.append([name])
            continue
        if current and current_size + size > max_shard_size:
            shards.append(current)
            current, current_size = [], 0
        current.append(name)
        current_size += size
    if current or not shards:
        shards.append(current)
    if len(shards) == 1:
        return {pattern.format(suffix=""): shards[0]}
    total = len(shards)
    return {pattern.format(suffix=f"-{i + 1:05d}-of-{total:05d}"): names for i, names in enumerate(shards)}


def write_model_files(
    state_dict: Mapping[str, torch.Tensor],
    folder: Path,
    *,
    max_shard_size: int | str,
    safe_serialization: bool,
) -> list[Path]:
    """Write the weights (main process only) and return the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    state = without_shared_tensors(state_dict) if safe_serialization else dict(state_dict)
    weights_name = SAFE_WEIGHTS_NAME if safe_serialization else WEIGHTS_NAME
    pattern = "model{suffix}.safetensors" if safe_serialization else "pytorch_model{suffix}.bin"
    shards = plan_shards(state, size_in_bytes(max_shard_size), pattern)
    _remove_stale_shards(folder, weights_name, set(shards))
    written = []
    for filename, names in shards.items():
        written.append(_write(folder / filename, {n: state[n] for n in names}, safe_serialization))
    index_name = SAFE_INDEX_NAME if safe_serialization else WEIGHTS_INDEX_NAME
    if len(shards) > 1:
        total = sum(t.numel() * t.element_size() for t in state.values())
        index = {
            "metadata": {"total_size": total},
            "weight_map": {name: filename for filename, names in shards.items() for name in names},
        }
        partial = folder / f".{index_name}.tmp"
        partial.write_text(json.dumps(index, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(partial, folder / index_name)
        written.append(folder / index_name)
    elif (folder / index_name).exists():
        (folder / index_name).unlink()  # an index from an earlier sharded save would point at deleted shards
    return written


def _write(path: Path, tensors: dict[str, Any], safe_serialization: bool) -> Path:
    partial = path.with_name(f".{path.name}.tmp")
    if safe_serialization:
        from safetensors.torch import save_file

        save_file(tensors, str(partial), metadata={"format": "pt"})
    else:
        torch.save(tensors, partial)
    os.replace(partial, path)
    return path


def _remove_stale_shards(folder: Path, weights_name: str, keep: set[str]) -> None:
    """Shards of an earlier save that this save does not overwrite (e.g. it had more shards)."""
    stem = weights_name.replace(".bin", "").replace(".safetensors", "")
    for path in folder.iterdir():
        bare = path.name.replace(".bin", "").replace(".safetensors", "")
        if path.is_file() and path.name.startswith(stem) and path.name not in keep and _SHARD.fullmatch(bare):
            path.unlink()


def load_weights_file(path: Path) -> dict[str, torch.Tensor]:
    """A model weights file of either format, on the CPU."""
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path), device="cpu")
    return torch.load(path, map_location="cpu", weights_only=True)


def match_keys(saved: Mapping[str, Any], expected: set[str]) -> dict[str, Any]:
    """Saved keys mapped onto the unwrapped model's: drop the wrapper prefixes a wrapped model's
    state_dict adds (DDP's `module.`, torch.compile's `_orig_mod.`), as checkpoints from
    Accelerate's save_state under DDP carry them."""
    out = {}
    for key, value in saved.items():
        bare = key
        while bare not in expected and bare.startswith(("module.", "_orig_mod.")):
            bare = bare.split(".", 1)[1]
        out[bare] = value
    return out
