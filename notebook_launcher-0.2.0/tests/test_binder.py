"""binder/ holds what mybinder.org needs; Binder itself cannot be reached from here, so check that
its files agree with pyproject.toml and are enough for the notebooks they are meant to run."""

from __future__ import annotations

import ast
import functools
import importlib.metadata as md
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

try:
    import tomllib  # Python 3.11+
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parent.parent
BINDER = ROOT / "binder"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def pyproject_requirements() -> dict[str, Requirement]:
    """[project.dependencies] plus the notebooks extra: what running the notebooks needs."""
    project = pyproject()
    lines = project["dependencies"] + project["optional-dependencies"]["notebooks"]
    return {canonicalize_name(r.name): r for r in map(Requirement, lines)}


def binder_lines() -> list[str]:
    lines = []
    for raw in (BINDER / "requirements.txt").read_text().splitlines():
        line = raw.split(" #", 1)[0].strip()
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def binder_requirements() -> dict[str, Requirement]:
    reqs = [Requirement(line) for line in binder_lines() if not line.startswith("-")]
    names = [canonicalize_name(r.name) for r in reqs]
    assert len(names) == len(set(names)), f"a package is listed twice in binder/requirements.txt: {names}"
    return dict(zip(names, reqs, strict=True))


def test_binder_installs_the_same_packages_as_pyproject():
    ours, binder = pyproject_requirements(), binder_requirements()
    assert set(binder) == set(ours), (
        f"binder/requirements.txt and pyproject.toml differ: only in binder {sorted(set(binder) - set(ours))}, "
        f"only in pyproject {sorted(set(ours) - set(binder))}"
    )


def test_binder_version_ranges_match_pyproject():
    ours, binder = pyproject_requirements(), binder_requirements()
    for name, req in binder.items():
        if name == "torch":
            continue  # pinned to a CPU build, checked below
        assert req.specifier == ours[name].specifier, f"{name}: binder has {req}, pyproject has {ours[name]}"
        assert not req.extras and req.marker is None, f"{name}: unexpected extras or marker in {req}"


def test_binder_torch_is_a_cpu_build_inside_pyprojects_range():
    torch_req = binder_requirements()["torch"]
    pins = [spec for spec in torch_req.specifier if spec.operator == "=="]
    assert len(pins) == 1, f"torch should be pinned to one CPU build in binder, got {torch_req}"
    version = Version(pins[0].version)
    assert version.local == "cpu", f"{version} is not a +cpu build: Binder would download CUDA wheels"
    allowed: SpecifierSet = pyproject_requirements()["torch"].specifier
    assert allowed.contains(version), f"binder pins torch {version}, outside pyproject's torch{allowed}"
    options = [line.split() for line in binder_lines() if line.startswith("-")]
    assert ["--extra-index-url", CPU_INDEX] in options, "the CPU wheel index must be given to pip"
    assert not any(opt[0] in ("--index-url", "-i") for opt in options), "PyPI must stay the main index"


def test_binder_python_satisfies_requires_python():
    runtime = (BINDER / "runtime.txt").read_text().strip()
    found = re.fullmatch(r"python-(\d+\.\d+)", runtime)
    assert found, f"binder/runtime.txt must read python-X.Y (mybinder's format), got {runtime!r}"
    assert SpecifierSet(pyproject()["requires-python"]).contains(found.group(1) + ".0")


def test_postbuild_installs_this_package_without_touching_dependencies():
    post = BINDER / "postBuild"
    text = post.read_text()
    assert text.startswith("#!/bin/bash\n") and "set -euo pipefail" in text
    assert os.access(post, os.X_OK), "binder/postBuild must be executable"
    tracked = subprocess.run(
        ["git", "ls-files", "-s", "binder/postBuild"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    if tracked:  # once committed, git must record the executable bit (Binder checks out from git)
        assert tracked.startswith("100755"), f"git does not mark binder/postBuild executable: {tracked}"
    commands = [line for line in text.splitlines() if line and not line.lstrip().startswith("#")]
    installs = [c for c in commands if re.search(r"\bpip install\b", c)]
    assert len(installs) == 1 and re.search(r"--no-deps -e \.$", installs[0]), installs
    subprocess.run(["bash", "-n", str(post)], check=True)


@functools.cache
def _importable_after_binder() -> frozenset[str]:
    return frozenset(_import_closure(binder_requirements()))


def _import_closure(requirements: dict[str, Requirement]) -> set[str]:
    """Top-level modules importable after installing the requirements (their dependencies included),
    judged from this environment's installed metadata."""
    dists, todo = set(), list(requirements)
    while todo:
        name = todo.pop()
        if name in dists:
            continue
        dists.add(name)
        try:
            requires = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        for line in requires:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(req.name))
    modules = set(sys.stdlib_module_names) | {"notebook_launcher"}
    for module, providers in md.packages_distributions().items():
        if any(canonicalize_name(p) in dists for p in providers):
            modules.add(module)
    return modules


def _unconditional_imports(source: str) -> set[str]:
    """Top-level module names imported outside try/if blocks (optional imports are allowed)."""
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    tree = ast.parse("\n".join(lines))
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Try, ast.If)):
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name.split(".")[0] for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                found.add(child.module.split(".")[0])
            visit(child)

    visit(tree)
    return found


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.stem)
def test_binder_provides_every_module_a_notebook_imports(path: Path):
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(path, as_version=4)
    needed: set[str] = set()
    written: set[str] = set()  # modules the notebook writes itself (%%writefile .../train.py)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        magic, _, body = cell.source.lstrip().partition("\n")
        if magic.startswith("%%writefile"):  # the script it writes runs here too
            written.add(Path(magic.split()[-1]).stem)
            needed |= _unconditional_imports(body)
        elif not magic.startswith("%%"):
            needed |= _unconditional_imports(cell.source)
    missing = sorted(needed - written - _importable_after_binder())
    assert not missing, f"{path.name} imports {missing}, which binder/requirements.txt does not install"
