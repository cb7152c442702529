"""Automatic checkpoint naming (Accelerate's ProjectConfiguration): `{project_dir}/checkpoints/
checkpoint_{iteration}`, the newest found by its number, and total_limit rotation.

Rotation differs from Accelerate in one way: Accelerate deletes the oldest checkpoints before it
writes the new one, so a crash while saving can leave fewer complete checkpoints than total_limit
(none, with total_limit=1). Here the oldest are deleted only after the new one is complete; the
checkpoints left on disk are the same.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from ...errors import AcceleratorError

_NUMBER = re.compile(r"([0-9]+)(?=[^/]*$)")


def checkpoints_folder(project_dir: str | None) -> Path:
    if project_dir is None:
        raise AcceleratorError(
            "Automatic checkpoint naming needs a project directory: Accelerator(project_dir=...) or "
            "ProjectConfiguration(project_dir=..., automatic_checkpoint_naming=True)."
        )
    return Path(project_dir) / "checkpoints"


def checkpoint_number(path: Path) -> int | None:
    """The last number in the folder name (Accelerate's rule): checkpoint_12 -> 12."""
    found = _NUMBER.search(Path(path).name)
    return int(found.group(1)) if found else None


def existing_checkpoints(folder: Path) -> list[Path]:
    """Complete checkpoint folders, oldest first (half-written hidden folders are not checkpoints)."""
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")]
    numbered = [p for p in found if checkpoint_number(p) is not None]
    return sorted(numbered, key=lambda p: checkpoint_number(p) or 0)  # never 0 for lack of a number


def new_checkpoint_dir(project_dir: str | None, iteration: int) -> Path:
    target = checkpoints_folder(project_dir) / f"checkpoint_{iteration}"
    if target.exists():
        raise AcceleratorError(
            f"Checkpoint directory {str(target)!r} ({iteration}) already exists. Set accelerator.save_iteration "
            "(or ProjectConfiguration(iteration=...)) to the iteration to continue from, e.g. after "
            "load_state() of the latest checkpoint."
        )
    return target


def latest_checkpoint(project_dir: str | None) -> Path:
    folder = checkpoints_folder(project_dir)
    found = existing_checkpoints(folder)
    if not found:
        raise AcceleratorError(f"No checkpoint found under {str(folder)!r}; save_state() writes them there.")
    return found[-1]


def rotate(folder: Path, total_limit: int | None, keep: Path) -> list[Path]:
    """Delete the oldest checkpoints so that at most total_limit remain; never `keep` (the new one)."""
    if total_limit is None:
        return []
    found = existing_checkpoints(folder)
    excess = len(found) - total_limit
    doomed = [p for p in found if p.resolve() != keep.resolve()][: max(excess, 0)]
    for path in doomed:
        shutil.rmtree(path, ignore_errors=True)
    return doomed
