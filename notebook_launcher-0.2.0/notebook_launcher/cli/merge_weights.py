"""`notebook-launcher merge-weights CHECKPOINT_DIRECTORY OUTPUT_PATH`: one file of full weights
from a sharded checkpoint, as `accelerate merge-weights` does (same arguments and flags).

- an FSDP SHARDED_STATE_DICT checkpoint: a torch.distributed.checkpoint folder (the
  `pytorch_model_fsdp_0/` that `save_state` writes, or the `save_state` folder around it);
- a DeepSpeed ZeRO checkpoint: the folder `save_state` writes (its `deepspeed/` tag folder), a
  tag folder itself, or a folder with a `latest` file; DeepSpeed's zero_to_fp32 joins the
  partitions into fp32 weights.

Writes OUTPUT_PATH/model.safetensors, or OUTPUT_PATH/pytorch_model.bin with
--unsafe_serialization. The keys are the model's own (`model.load_state_dict(...)` takes them).
Runs in this one process, on the CPU: it needs the memory of the whole model.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from ..errors import install_hint
from .flags import Parser, UsageError

SAFE_WEIGHTS_NAME, WEIGHTS_NAME = "model.safetensors", "pytorch_model.bin"
DCP_METADATA = ".metadata"
FSDP_MODEL_FOLDER = "pytorch_model_fsdp_0"


def merge_parser(prog: str) -> Parser:
    parser = Parser(
        prog=prog, description="Merge a sharded FSDP or DeepSpeed checkpoint into one weights file."
    )
    parser.add_argument("checkpoint_directory", help="the sharded checkpoint (FSDP or DeepSpeed)")
    parser.add_argument(
        "output_path", help="the folder to write model.safetensors (or pytorch_model.bin) into"
    )
    parser.add_argument(
        "--unsafe_serialization",
        "--unsafe-serialization",
        action="store_true",
        help="write pytorch_model.bin (torch.save) instead of model.safetensors",
    )
    parser.add_argument(
        "--remove_checkpoint_dir",
        "--remove-checkpoint-dir",
        action="store_true",
        help="delete the checkpoint directory after merging",
    )
    return parser


def merge_command(argv: list[str], prog: str) -> int:
    args = merge_parser(prog).parse_args(argv)
    source = Path(args.checkpoint_directory).expanduser()
    path = merge_weights(source, Path(args.output_path).expanduser(), safe=not args.unsafe_serialization)
    print(f"Merged weights written to {path}")
    if args.remove_checkpoint_dir:
        shutil.rmtree(source)
        print(f"Removed {source}")
    return 0


def merge_weights(source: Path, output: Path, *, safe: bool = True) -> Path:
    """Write the full weights of the checkpoint at `source` into `output`; returns the file."""
    if not source.is_dir():
        raise UsageError(f"checkpoint directory {str(source)!r} does not exist or is not a folder.")
    kind, where = detect(source)
    output.mkdir(parents=True, exist_ok=True)
    state = _from_dcp(where, output) if kind == "dcp" else _from_deepspeed(*where)
    if not state:
        raise UsageError(f"{str(source)!r} holds no model weights.")
    target = output / (SAFE_WEIGHTS_NAME if safe else WEIGHTS_NAME)
    _save(state, target, safe)
    return target


def detect(source: Path) -> tuple[str, Any]:
    """("dcp", folder) or ("deepspeed", (parent, tag)); UsageError naming what was found."""
    if (source / DCP_METADATA).is_file():
        return "dcp", source
    if (source / FSDP_MODEL_FOLDER / DCP_METADATA).is_file():
        return "dcp", source / FSDP_MODEL_FOLDER
    if any(source.glob("*model_states.pt")):
        return "deepspeed", (source.parent, source.name)
    if (source / "latest").is_file():
        return "deepspeed", (source, (source / "latest").read_text().strip())
    tags = sorted(p.name for p in source.iterdir() if p.is_dir() and any(p.glob("*model_states.pt")))
    if len(tags) == 1:
        return "deepspeed", (source, tags[0])
    found = ", ".join(sorted(p.name for p in source.iterdir())[:8]) or "nothing"
    raise UsageError(
        f"{str(source)!r} is not a sharded checkpoint: no torch.distributed.checkpoint {DCP_METADATA} file, "
        f"no {FSDP_MODEL_FOLDER}/ folder and no DeepSpeed *model_states.pt files"
        + (f" (several DeepSpeed tags: {', '.join(tags)}; pass one of those folders)" if tags else "")
        + f". It holds: {found}. Pass the folder save_state() wrote with fsdp_state_dict_type=SHARDED_STATE_DICT "
        "or under DeepSpeed."
    )


def _from_dcp(folder: Path, scratch_in: Path) -> dict[str, Any]:
    """The checkpoint's tensors, read in this one process (torch's own dcp -> torch.save converter,
    through a scratch file next to the output)."""
    import tempfile
    import warnings

    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    with tempfile.TemporaryDirectory(dir=scratch_in) as scratch, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")  # one process: intended
        dcp_to_torch_save(str(folder), Path(scratch) / "state.pt")
        state = torch.load(Path(scratch) / "state.pt", map_location="cpu", weights_only=True)
    if set(state) == {"model"}:  # save_state writes {"model": ...}
        state = state["model"]
    elif "optimizer" in state or "state" in state:
        raise UsageError(
            f"{str(folder)!r} is an optimizer checkpoint; pass the model's folder ({FSDP_MODEL_FOLDER})."
        )
    return state


def _from_deepspeed(parent: Path, tag: str) -> dict[str, Any]:
    try:
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
    except ImportError as exc:
        raise UsageError(
            f"{str(parent / tag)!r} is a DeepSpeed checkpoint and merging it needs deepspeed ({exc}); "
            f"run {install_hint('deepspeed', 'deepspeed')}."
        ) from None
    return get_fp32_state_dict_from_zero_checkpoint(str(parent), tag=tag)


def _save(state: dict[str, Any], target: Path, safe: bool) -> None:
    import torch

    tensors = {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}
    if not safe:
        torch.save(tensors, target)
        return
    from safetensors.torch import save_file

    seen: set[int] = set()
    plain = {}
    for name, tensor in tensors.items():  # safetensors refuses shared or strided storage
        tensor = tensor.detach().cpu().contiguous()
        ptr = tensor.untyped_storage().data_ptr()
        plain[name] = tensor.clone() if ptr in seen else tensor
        seen.add(ptr)
    save_file(plain, str(target), metadata={"format": "pt"})
