"""Runs one of Accelerate's own distributed test scripts (accelerate/test_utils/scripts/) unchanged, on
HuggingFace Accelerate or with its `accelerate` imports answered by notebook_launcher, and reports
each sub-test its `main()` runs as one line per rank:

    python -m torch.distributed.run --nproc_per_node 2 tests/accelerate_scripts.py ours test_ops
        [--skip=test_distributed_data_loop::test_stateful_dataloader ...]

The script's file is executed as it is installed; its `main()` decides which sub-tests run on this
world (as under `accelerate launch`). Each function `main()` calls by name from the script is wrapped
so that a failing sub-test is reported (SUBTEST<TAB>rank<TAB>name<TAB>PASS|FAIL<TAB>message) and the
next one still runs.

With `ours`, a meta-path finder answers the `accelerate` module names from ours, as the migration
table maps them (docs/migrating-from-accelerate.md). `accelerate.test_utils` is a small module built
here: Accelerate's own `RegressionDataset` / `RegressionModel` (test_utils/training.py, plain torch
and numpy, loaded from its file), and `are_the_same_tensors` / `assert_exception` / `require_bnb` written on
ours (Accelerate's gather through its own state).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import traceback
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

MARK = "SUBTEST"

# Accelerate's module -> ours (the migration table's mapping; its submodules of utils fold into the face)
ALIASES = {
    "accelerate": "notebook_launcher",
    "accelerate.accelerator": "notebook_launcher",
    "accelerate.state": "notebook_launcher.state",
    "accelerate.data_loader": "notebook_launcher.data_loader",
    "accelerate.local_sgd": "notebook_launcher.local_sgd",
    "accelerate.tracking": "notebook_launcher.tracking",
    "accelerate.utils": "notebook_launcher.utils",
}
TEST_UTILS = ("accelerate.test_utils", "accelerate.test_utils.testing", "accelerate.test_utils.training")


def accelerate_dir() -> Path:
    """The installed accelerate package's folder, found without importing it."""
    spec = importlib.util.find_spec("accelerate")
    if spec is None or spec.origin is None:
        raise SystemExit("accelerate is not installed (pip install accelerate==1.16.0)")
    return Path(spec.origin).parent


def target_of(fullname: str, accelerate_root: Path) -> str | None:
    """Our module answering an `accelerate` module name, or None when this finder does not answer it."""
    if fullname in ALIASES:
        return ALIASES[fullname]
    sub = fullname.removeprefix("accelerate.utils.")
    if sub != fullname and "." not in sub and (accelerate_root / "utils" / f"{sub}.py").exists():
        return "notebook_launcher.utils"  # accelerate.utils.operations, .dataclasses, ...: one face here
    return None


class _Alias(importlib.abc.Loader):
    """A package-like proxy module whose attributes are looked up in another module (so that
    `accelerate.utils.operations` can be imported below `accelerate.utils`)."""

    def __init__(self, build: Callable[[], types.ModuleType]) -> None:
        self._build = build

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        target = self._build()
        proxy = types.ModuleType(spec.name, target.__doc__)
        proxy.__path__ = []  # type: ignore[attr-defined]
        proxy.__getattr__ = lambda name: getattr(target, name)  # type: ignore[method-assign]
        proxy.__dict__["__dir__"] = lambda: dir(target)
        return proxy

    def exec_module(self, module: types.ModuleType) -> None:
        return None


class AccelerateFromOurs(importlib.abc.MetaPathFinder):
    """Answers `accelerate`, `accelerate.utils[.*]`, `accelerate.state`, `accelerate.data_loader`,
    `accelerate.accelerator` from notebook_launcher, and `accelerate.test_utils` from test_utils_module."""

    def __init__(self, accelerate_root: Path) -> None:
        self._root = accelerate_root

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname in TEST_UTILS:
            return importlib.machinery.ModuleSpec(fullname, _Alias(lambda: test_utils_module(self._root)))
        ours = target_of(fullname, self._root)
        if ours is None:
            if fullname.startswith("accelerate."):
                raise ModuleNotFoundError(
                    f"{fullname} has no counterpart in notebook_launcher", name=fullname
                )
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(lambda: importlib.import_module(ours)))


def answer_accelerate_from_ours() -> None:
    """From now on, in this process and the workers it forks, `accelerate...` imports are ours."""
    for name in [n for n in sys.modules if n == "accelerate" or n.startswith("accelerate.")]:
        del sys.modules[name]  # a real accelerate imported earlier must not answer
    if not any(isinstance(finder, AccelerateFromOurs) for finder in sys.meta_path):
        sys.meta_path.insert(0, AccelerateFromOurs(accelerate_dir()))


@functools.cache
def test_utils_module(accelerate_root: Path) -> types.ModuleType:
    """Accelerate's RegressionDataset/RegressionModel (pure torch + numpy) with helpers on our state."""
    import torch

    module = types.ModuleType("accelerate_test_utils_on_ours")
    training = accelerate_root / "test_utils" / "training.py"
    spec = importlib.util.spec_from_file_location("accelerate_test_utils_training", training)
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)  # imports accelerate.utils.dataclasses: answered by ours

    def are_the_same_tensors(tensor: torch.Tensor) -> bool:
        from notebook_launcher.state import AcceleratorState
        from notebook_launcher.utils import gather

        state = AcceleratorState()
        everyone = gather(tensor[None].clone().to(state.device)).cpu()
        return all(torch.equal(row, tensor.cpu()) for row in everyone)

    @contextlib.contextmanager
    def assert_exception(exception_class: type[BaseException], msg: str | None = None) -> Iterator[None]:
        try:
            yield
        except Exception as error:
            assert isinstance(error, exception_class), (
                f"expected {exception_class}, got {type(error)}: {error}"
            )
            assert msg is None or msg in str(error), f"{msg!r} not in {str(error)!r}"
            return
        raise AssertionError(f"expected {exception_class}, but nothing was raised")

    import pytest

    from notebook_launcher.utils import is_bnb_available

    module.RegressionDataset = loaded.RegressionDataset
    module.RegressionModel = loaded.RegressionModel
    module.are_the_same_tensors = are_the_same_tensors
    module.assert_exception = assert_exception
    module.require_bnb = pytest.mark.skipif(not is_bnb_available(), reason="test requires bitsandbytes")
    return module


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def _literal(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def _report(name: str, status: str, message: str = "") -> None:
    line = message.replace("\n", " ").replace("\t", " ")[:400]
    sys.stdout.flush()
    # one write per line (both ranks share the pipe), starting on a line of its own: the other rank
    # may have written part of a line just before
    os.write(sys.stdout.fileno(), f"\n{MARK}\t{_rank()}\t{name}\t{status}\t{line}\n".encode())


def _is_subtest(name: str) -> bool:
    """test_*, check_* and *_check: the scripts' sub-tests (not helpers such as create_accelerator)."""
    return name.startswith(("test_", "check_")) or name.endswith("_check")


def reset_states() -> None:
    """Between two scripts in one launch: the next one starts from fresh states, as in a new process,
    in the process group the first one made (the `accelerate` name is ours or theirs)."""
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()


def wrap_subtests(module: types.ModuleType, skip: frozenset[str] = frozenset()) -> None:
    """Each function of the script that its main() calls by name runs as one reported sub-test; those
    named in `skip` (script::function) are reported SKIP and not called."""
    called = set(module.main.__code__.co_names)
    script = module.__name__.removeprefix("accelerate_script_")
    seen: dict[str, int] = {}
    for attr in sorted(called):
        fn = getattr(module, attr, None)
        if (
            not isinstance(fn, types.FunctionType)
            or fn.__module__ != module.__name__
            or not _is_subtest(attr)
        ):
            continue

        def run(*args: Any, __fn: Callable[..., Any] = fn, **kwargs: Any) -> Any:
            shown = [repr(a) for a in args if _literal(a)] + [
                f"{k}={v!r}" for k, v in kwargs.items() if _literal(v)
            ]
            name = f"{script}::{__fn.__name__}" + (f"({', '.join(shown)})" if shown else "")
            seen[name] = seen.get(name, 0) + 1
            if seen[name] > 1:
                name = f"{name}#{seen[name]}"
            if f"{script}::{__fn.__name__}" in skip:
                _report(name, "SKIP", "cannot run in this world (see the harness's caller)")
                return None
            try:
                result = __fn(*args, **kwargs)
            except Exception as error:  # a failing sub-test is reported; the next one still runs
                last = traceback.extract_tb(error.__traceback__)[-1]
                _report(name, "FAIL", f"{type(error).__name__}: {error} (line {last.lineno}: {last.line})")
                return None
            _report(name, "PASS")
            return result

        setattr(module, attr, run)


def load_script(accelerate_root: Path, script: str) -> types.ModuleType:
    path = accelerate_root / "test_utils" / "scripts" / f"{script}.py"
    spec = importlib.util.spec_from_file_location(f"accelerate_script_{script}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def torchrun_command(
    library: str, scripts: list[str], processes: int = 2, skip: tuple[str, ...] = ()
) -> list[str]:
    """The launch of this harness: `library` is "ours" or "accelerate"; run it with cwd a scratch folder."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        str(processes),
        str(Path(__file__).resolve()),
        library,
        *scripts,
        *(f"--skip={name}" for name in skip),
    ]


def start(
    library: str, scripts: list[str], *, cwd: Path, env: dict[str, str], skip: tuple[str, ...] = ()
) -> subprocess.Popen:
    """This harness under torchrun on 2 processes, in its own session (kill its group on a timeout)."""
    from test_cli_helpers import start_cli  # beside this file

    return start_cli(torchrun_command(library, scripts, skip=skip), cwd=cwd, env=env, program=[])


def parse_report(stdout: str) -> dict[str, dict[int, tuple[str, str]]]:
    """{sub-test: {rank: (PASS|FAIL, message)}} from the lines of a run."""
    found: dict[str, dict[int, tuple[str, str]]] = {}
    for line in stdout.splitlines():
        if line.startswith(f"{MARK}\t"):
            _, rank, name, status, message = ([*line.split("\t"), ""])[:5]
            found.setdefault(name, {})[int(rank)] = (status, message)
    return found


def main(argv: list[str]) -> None:
    skip = frozenset(a.removeprefix("--skip=") for a in argv if a.startswith("--skip="))
    argv = [a for a in argv if not a.startswith("--skip=")]
    library, scripts = argv[0], argv[1:]
    if library not in ("ours", "accelerate") or not scripts:
        raise SystemExit(
            "usage: accelerate_scripts.py ours|accelerate SCRIPT [SCRIPT ...] [--skip=script::function ...]"
        )
    root = accelerate_dir()
    if library == "ours":
        answer_accelerate_from_ours()
    import torch.distributed as dist

    destroy = dist.destroy_process_group
    # each main() ends with destroy_process_group(); the group is kept for the next script (one
    # launch for all of them: a second rendezvous in one torchrun worker hangs) and destroyed at the end
    dist.destroy_process_group = lambda group=None: None
    for index, script in enumerate(scripts):
        if index:
            reset_states()
        try:
            module = load_script(root, script)
        except Exception as error:  # the script does not even import: every sub-test is lost
            _report(f"{script}:import", "FAIL", f"{type(error).__name__}: {error}")
            continue
        wrap_subtests(module, skip)
        try:
            module.main()
        except Exception as error:
            _report(f"{script}:main", "FAIL", f"{type(error).__name__}: {error}")
        else:
            _report(f"{script}:main", "PASS")
    dist.destroy_process_group = destroy
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
