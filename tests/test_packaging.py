"""Installable as users install it: the version in one place, every third-party import declared,
and (slow) the wheel built and installed in a fresh venv with only its declared dependencies,
running the README's jobs there (tests/installed_smoke.py). The extras' venvs are
scripts/check_extras.py's, in .ci/run (too slow for the suite)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tarfile
import time
import zipfile

import pytest
import tomllib
from fresh_venv import ROOT, build, make_venv, run, smoke

PACKAGE = ROOT / "notebook_launcher"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# import name -> the requirement that brings it: a dependency ("") or the extra named
DECLARED = {"torch": "", "cloudpickle": "", "yaml": "", "ipywidgets": "", "safetensors": "", "numpy": "",
            "IPython": "", "traitlets": "", "comm": ""}  # fmt: skip
EXTRA_OF = {
    "deepspeed": "deepspeed", "torchao": "fp8", "transformer_engine": "fp8", "ray": "ray",
    "submitit": "slurm", "zmq": "notebooks", "tensorboardX": "tensorboard", "aim": "aim",
    "clearml": "clearml", "comet_ml": "comet_ml", "dvclive": "dvclive", "mlflow": "mlflow",
    "swanlab": "swanlab", "trackio": "trackio", "wandb": "wandb",
}  # fmt: skip


def third_party_imports() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "notebook_launcher":
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_third_party_import_is_a_dependency_or_an_extra():
    extras = PYPROJECT["project"]["optional-dependencies"]
    for name, files in third_party_imports().items():
        assert name in DECLARED or name in EXTRA_OF, (
            f"{name} (imported by {sorted(files)}) is declared nowhere"
        )
        if name in EXTRA_OF:
            assert EXTRA_OF[name] in extras, f"{name}: no [{EXTRA_OF[name]}] extra in pyproject.toml"
    deps = " ".join(PYPROJECT["project"]["dependencies"]).lower()
    for requirement in (
        "torch",
        "cloudpickle",
        "pyyaml",
        "ipywidgets",
        "safetensors",
        "numpy",
        "ipython",
        "traitlets",
    ):
        assert requirement in deps, f"{requirement} is imported at run time but not a dependency"


def test_the_oldest_versions_job_pins_every_declared_floor():
    """.ci/oldest-constraints.txt pins each lower bound pyproject.toml declares (dependencies and the
    unpinned ranges of the test and notebooks extras), so CI's oldest job tests the floors we claim."""
    from packaging.version import Version  # 2.1 == 2.1.0

    pins = {}
    for line in (ROOT / ".ci" / "oldest-constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[name.lower().replace("_", "-")] = version
    declared = list(PYPROJECT["project"]["dependencies"])
    for extra in ("test", "notebooks"):
        declared += PYPROJECT["project"]["optional-dependencies"][extra]
    untestable = {  # why a declared floor is not pinned there
        "transformers": "the test extra pins transformers 5.25.0, so [notebooks]' floor cannot sit beside it",
        "ruff": "a developer's linter: neither the package nor its tests import it",
    }
    floors = {}
    for requirement in declared:
        found = re.match(r"^([A-Za-z0-9_.\-]+)\s*>=\s*([0-9.]+)", requirement)
        if found and found.group(1).lower() not in ("torch", *untestable):  # torch: .ci/run's TORCH_VERSION
            floors[found.group(1).lower().replace("_", "-")] = found.group(2)

    wrong = {
        name: (floor, pins.get(name))
        for name, floor in floors.items()
        if not (name in pins and Version(pins[name]) == Version(floor))
    }
    assert not wrong, f"declared floor vs .ci/oldest-constraints.txt pin: {wrong}"
    torch_floor = re.search(r"torch>=([0-9.]+)", " ".join(PYPROJECT["project"]["dependencies"])).group(1)
    assert f"TORCH_VERSION={torch_floor}" in (ROOT / ".ci" / "run").read_text()


def test_the_version_lives_in_one_place():
    import notebook_launcher
    from notebook_launcher._version import __version__
    from notebook_launcher.cli import main

    assert "version" in PYPROJECT["project"]["dynamic"] and "version" not in PYPROJECT["project"]
    assert (
        PYPROJECT["tool"]["setuptools"]["dynamic"]["version"]["attr"]
        == "notebook_launcher._version.__version__"
    )
    assert notebook_launcher.__version__ == __version__
    assert re.search(rf"^## {re.escape(__version__)}$", (ROOT / "CHANGELOG.md").read_text(), re.M)
    done = subprocess.run(
        [sys.executable, "-m", "notebook_launcher", "--version"], capture_output=True, text=True, timeout=60
    )
    assert done.stdout == f"notebook-launcher {__version__}\n" and main(["-V"]) == 0


# Slow: ~95 s (build 9 s, the venv with torch and the wheel 28 s, the jobs inside 55 s; 2 shared cores).
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_wheel_alone_runs_the_readme_jobs_in_a_fresh_venv(tmp_path):
    start = time.monotonic()
    sdist, wheel = build(tmp_path / "dist")
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for needed in ("LICENSE", "README.md", "CHANGELOG.md", "pyproject.toml", "docs/architecture.md",
                   "tests/test_packaging.py", "quickstart.py", "notebooks/01_quickstart.ipynb"):  # fmt: skip
        assert needed in names, f"the sdist lacks {needed}"
    assert not [n for n in names if "__pycache__" in n]
    with zipfile.ZipFile(wheel) as whl:
        listed = whl.namelist()
    assert "notebook_launcher/py.typed" in listed and any(
        n.endswith(".dist-info/licenses/LICENSE") for n in listed
    )
    built = time.monotonic()
    python = make_venv(tmp_path / "venv", wheel)
    installed = time.monotonic()
    out = smoke(python, "base")
    print(out)
    print(
        f"build {built - start:.0f}s, venv {installed - built:.0f}s, jobs {time.monotonic() - installed:.0f}s"
    )
    assert "installed_smoke base: all passed" in out
    # Then a kernel in the same venv (ipykernel, and matplotlib for a figure: what a notebook user
    # adds): workers started by the warm pool and by spawn import IPython themselves (issue 37).
    run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-compile", "ipykernel", "matplotlib"],
        timeout=900,
    )
    out = smoke(python, "display")
    print(out)
    assert "installed_smoke display: all passed" in out
