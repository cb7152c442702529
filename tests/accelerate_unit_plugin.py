"""A pytest plugin (`-p accelerate_unit_plugin`) under which HuggingFace Accelerate's own unit-test files
run unchanged with `accelerate` answered by notebook_launcher:

- `accelerate`, `accelerate.utils[.*]`, `accelerate.state`, ... are ours, as the migration table maps
  them (tests/accelerate_scripts.py's finder);
- `accelerate.test_utils[.*]` is Accelerate's own test_utils package, executed from its published source
  (the folder in $ACCELERATE_TEST_UTILS), its `from ..state import ...` answered by ours too. Its
  testing.py imports three internals of Accelerate's that our accelerate.utils refuses on purpose
  (compare_versions, is_torch_version, check_cuda_fp8_capability, used only to decide skips); small
  stand-ins are lent to it while test_utils' modules execute, so the tests themselves still see our
  refusal.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import operator
import os
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from accelerate_scripts import answer_accelerate_from_ours
from packaging.version import Version, parse

TEST_UTILS_ENV = "ACCELERATE_TEST_UTILS"
PACKAGE = "accelerate.test_utils"

_OPERATIONS: dict[str, Callable[[Any, Any], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
    "<=": operator.le,
    "<": operator.lt,
}


def _compare_versions(library_or_version: str | Version, operation: str, requirement_version: str) -> bool:
    installed = (
        parse(importlib.metadata.version(library_or_version))
        if isinstance(library_or_version, str)
        else library_or_version
    )
    return _OPERATIONS[operation](installed, parse(requirement_version))


def _is_torch_version(operation: str, version: str) -> bool:
    import torch

    return _OPERATIONS[operation](parse(parse(torch.__version__).base_version), parse(version))


def _check_cuda_fp8_capability() -> bool:
    import torch

    return torch.cuda.get_device_capability() >= (8, 9)


# what test_utils/testing.py imports from accelerate.utils that ours does not offer
LENT_TO_TEST_UTILS: dict[str, Callable[..., bool]] = {
    "compare_versions": _compare_versions,
    "is_torch_version": _is_torch_version,
    "check_cuda_fp8_capability": _check_cuda_fp8_capability,
}


class _TestUtilsLoader(importlib.machinery.SourceFileLoader):
    """Executes one of Accelerate's test_utils modules unchanged, with the stand-ins lent meanwhile."""

    def exec_module(self, module: types.ModuleType) -> None:
        face = vars(importlib.import_module("accelerate.utils"))
        lent = [name for name in LENT_TO_TEST_UTILS if name not in face]
        face.update({name: LENT_TO_TEST_UTILS[name] for name in lent})
        try:
            super().exec_module(module)
        finally:
            for name in lent:
                face.pop(name, None)


class TestUtilsFromSource(importlib.abc.MetaPathFinder):
    """Answers `accelerate.test_utils` and its submodules from the files of Accelerate's source tree."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != PACKAGE and not fullname.startswith(PACKAGE + "."):
            return None
        place = self._folder.joinpath(*fullname.split(".")[2:])
        is_package = place.is_dir()
        file = place / "__init__.py" if is_package else place.with_suffix(".py")
        if not file.is_file():
            return None
        return importlib.util.spec_from_file_location(
            fullname,
            file,
            loader=_TestUtilsLoader(fullname, str(file)),
            submodule_search_locations=[str(place)] if is_package else None,
        )


def install(test_utils: Path) -> None:
    """From now on, `accelerate` imports in this process are ours, test_utils Accelerate's own."""
    answer_accelerate_from_ours()
    sys.meta_path.insert(0, TestUtilsFromSource(test_utils))


install(Path(os.environ[TEST_UTILS_ENV]))
