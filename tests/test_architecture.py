"""The house rules, read from the source with `ast` (fast, nothing imported): which room may import
which, and how large a module may grow. See docs/architecture.md for the why."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "notebook_launcher"
MAX_LINES = 400


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _dotted(path: Path) -> str:
    parts = ["notebook_launcher", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(absolute module name, imported at module level) for every import in the file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = _dotted(path) if path.name == "__init__.py" else _dotted(path).rpartition(".")[0]
    top_level = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        at_top = id(node) in top_level
        if isinstance(node, ast.Import):
            found += [(alias.name, at_top) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.append((name, at_top))
            found += [(f"{name}.{alias.name}", at_top) for alias in node.names]
    return found


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "notebook_launcher" else ""


def _violations(room: str, forbidden: tuple[str, ...], module_level_only: bool = False) -> list[str]:
    bad = []
    for path in _modules():
        if _room(_dotted(path)) != room:
            continue
        for name, at_top in _imports(path):
            if module_level_only and not at_top:
                continue
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                bad.append(f"{path.relative_to(PACKAGE.parent)} imports {name}")
    return sorted(set(bad))


def test_the_runtime_never_needs_a_notebook_or_a_launcher():
    """Workers (and plain scripts under torchrun) must run without widgets, IPython or launch code."""
    forbidden = (
        "notebook_launcher.widgets",
        "notebook_launcher.launch",
        "notebook_launcher.cli",
        "notebook_launcher.interactive",
        "IPython",
        "ipywidgets",
    )
    assert _violations("runtime", forbidden) == []


def test_config_does_not_import_torch_at_module_level():
    """A LaunchConfig is built, saved and shipped before anything may touch a GPU."""
    assert _violations("config", ("torch",), module_level_only=True) == []


def test_the_cli_is_its_own_program():
    """The CLI reaches workers through the env contract only: no widgets, launcher or runtime."""
    forbidden = (
        "notebook_launcher.widgets",
        "notebook_launcher.launch",
        "notebook_launcher.runtime",
        "IPython",
    )
    assert _violations("cli", forbidden) == []


def test_only_the_public_face_and_interactive_import_widgets():
    """The launcher builds a RunView only when view= asks for one (inside that function)."""
    allowed = {"widgets", "interactive", ""}
    bad = []
    for path in _modules():
        room = _room(_dotted(path))
        if room in allowed or path == PACKAGE / "__init__.py":
            continue
        for name, at_top in _imports(path):
            if name.startswith("notebook_launcher.widgets") and (at_top or room != "launch"):
                bad.append(f"{path.relative_to(PACKAGE.parent)} imports {name}")
    assert bad == []


def test_interactive_needs_ipython_only_for_its_magics():
    """The rank side of %%ranks runs in worker processes: no IPython there, no runtime at import."""
    bad = [
        v
        for v in _violations("interactive", ("IPython",))
        if not v.startswith("notebook_launcher/interactive/magic.py ")
    ]
    bad += _violations(
        "interactive", ("notebook_launcher.runtime", "notebook_launcher.widgets"), module_level_only=True
    )
    assert bad == []


def test_widgets_are_imported_lazily_by_the_launcher():
    assert _violations("launch", ("notebook_launcher.widgets", "ipywidgets"), module_level_only=True) == []


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_modules_stay_small(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, (
        f"{path.relative_to(PACKAGE.parent)} has {lines} lines (limit {MAX_LINES}): split it"
    )


def test_every_package_says_what_lives_there():
    for init in PACKAGE.rglob("__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc, (
            f"{init.relative_to(PACKAGE.parent)} needs a docstring: what lives here, who may import it"
        )


def test_the_checker_sees_a_forbidden_import(tmp_path, monkeypatch):
    """The rules above would fail: a runtime module importing the launcher is caught."""
    fake = tmp_path / "notebook_launcher"
    (fake / "runtime").mkdir(parents=True)
    (fake / "runtime" / "bad.py").write_text("from ..launch import notebook_launch\nimport IPython\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", fake)
    assert _violations("runtime", ("notebook_launcher.launch", "IPython")) == [
        "notebook_launcher/runtime/bad.py imports IPython",
        "notebook_launcher/runtime/bad.py imports notebook_launcher.launch",
        "notebook_launcher/runtime/bad.py imports notebook_launcher.launch.notebook_launch",
    ]


def test_the_launcher_reaches_clusters_only_lazily():
    """cluster= is the launcher's one way into clusters/ (the arrow is clusters -> launch)."""
    assert _violations("launch", ("notebook_launcher.clusters",), module_level_only=True) == []


def test_clusters_need_no_notebook_cli_or_runtime():
    """Cluster nodes run the launcher without widgets or IPython; the runtime only inside workers."""
    forbidden = (
        "notebook_launcher.widgets",
        "notebook_launcher.cli",
        "notebook_launcher.runtime",
        "IPython",
        "ipywidgets",
    )
    assert _violations("clusters", forbidden) == []
