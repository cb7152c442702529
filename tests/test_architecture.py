"""The house rules, read from the source with `ast` (fast, nothing imported): which room may import
which, and how large a module may grow. See docs/architecture.md for the why."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "notebook_launcher"
MAX_LINES = 400


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _dotted(path: Path) -> str:
    parts = ["notebook_launcher", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_statements(path: Path) -> Iterator[tuple[str, list[str], bool]]:
    """(absolute module name, names taken from it, at module level) for every import statement;
    `import a.b` gives ("a.b", [], ...), relative imports are resolved against the file's package."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = _dotted(path) if path.name == "__init__.py" else _dotted(path).rpartition(".")[0]
    top_level = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        at_top = id(node) in top_level
        if isinstance(node, ast.Import):
            yield from ((alias.name, [], at_top) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            yield name, [alias.name for alias in node.names], at_top


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(absolute module name, imported at module level) for every import in the file."""
    found = []
    for name, names, at_top in _import_statements(path):
        found.append((name, at_top))
        found += [(f"{name}.{taken}", at_top) for taken in names]
    return found


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "notebook_launcher" else ""


def _rooms(*names: str) -> tuple[str, ...]:
    return tuple(f"notebook_launcher.{name}" for name in names)


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
    forbidden = (*_rooms("widgets", "launch", "cli", "interactive", "clusters"), "IPython", "ipywidgets")
    assert _violations("runtime", forbidden) == []


def test_config_does_not_import_torch_at_module_level():
    """A LaunchConfig is built, saved and shipped before anything may touch a GPU."""
    assert _violations("config", ("torch",), module_level_only=True) == []


def test_the_cli_is_its_own_program():
    """The CLI reaches workers through the env contract only: no widgets, launcher or runtime."""
    assert _violations("cli", (*_rooms("widgets", "launch", "runtime"), "IPython")) == []


def test_only_the_public_face_and_interactive_import_widgets():
    """The launcher never imports the widgets, not even inside a function: view=True asks
    view_factory.py for the view the public face registered (the arrow is widgets -> launch)."""
    allowed = {"widgets", "interactive", ""}
    bad = []
    for path in _modules():
        room = _room(_dotted(path))
        if room in allowed or path == PACKAGE / "__init__.py":
            continue
        for name, _ in _imports(path):
            if name.startswith("notebook_launcher.widgets"):
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


def test_the_launcher_reaches_widgets_only_through_the_view_factory():
    """No import of the widgets (or ipywidgets) anywhere in launch/, function level included."""
    assert _violations("launch", ("notebook_launcher.widgets", "ipywidgets")) == []


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


def test_the_launcher_never_imports_clusters():
    """cluster= reaches clusters/ through the runner the public face registers (cluster_runner.py):
    the arrow is clusters -> launch, not even a function-level import back."""
    assert _violations("launch", ("notebook_launcher.clusters",)) == []


def test_clusters_need_no_notebook_cli_or_runtime():
    """Cluster nodes run the launcher without widgets or IPython; the runtime only inside workers."""
    forbidden = (*_rooms("widgets", "cli", "runtime"), "IPython", "ipywidgets")
    assert _violations("clusters", forbidden) == []


# Where launch/ may reach the runtime: where a worker runs (its child side, num_processes=1 in the
# kernel) or is preloaded for forking; always at function level (the kernel's side stays torch-free).
# warm/preload.py is the exception at module level: the warm pool's server imports it, never the kernel.
LAUNCH_RUNTIME_DOORS = ("launch/worker/", "launch/in_process.py", "launch/warm/")
SERVER_PRELOAD = "notebook_launcher/launch/warm/preload.py "


def _launch_runtime_violations() -> list[str]:
    bad = [
        found
        for found in _violations("launch", ("notebook_launcher.runtime",), module_level_only=True)
        if not found.startswith(SERVER_PRELOAD)
    ]
    for found in _violations("launch", ("notebook_launcher.runtime",)):
        if not any(found.startswith(f"notebook_launcher/{door}") for door in LAUNCH_RUNTIME_DOORS):
            bad.append(found)
    return sorted(set(bad))


def test_the_launcher_reaches_the_runtime_only_where_a_worker_runs():
    """The kernel's side reads workers' records from records/, never the runtime (which imports
    torch): launch -> runtime only in LAUNCH_RUNTIME_DOORS, inside functions."""
    assert _launch_runtime_violations() == []


def test_records_stand_alone():
    """records/ is what both sides read and write: stdlib only, nothing of the package, no torch."""
    modules = {_dotted(path): path for path in _modules()}
    bad = [
        f"{path.relative_to(PACKAGE.parent)} imports {name}"
        for module, path in modules.items()
        if _room(module) == "records"
        for name, _ in _imports(path)
        if (name.startswith("notebook_launcher") and _room(name) != "records")
        or name.split(".")[0] == "torch"
    ]
    assert bad == []


def test_the_checker_sees_the_launcher_reaching_the_runtime(tmp_path, monkeypatch):
    _plant(
        tmp_path,
        monkeypatch,
        {
            "launch/faults/watch.py": "from ...runtime.world import collective_log\n",
            "launch/worker/entry.py": "from ...runtime import telemetry\n",
            "launch/warm/warmup.py": "def warm():\n    import notebook_launcher.runtime\n",
            "records/activity.py": "import torch\nfrom ..system import network\n",
            "launch/notebook.py": "def run():\n    from ..clusters.launching import cluster_run\n",
        },
    )
    assert _violations("launch", ("notebook_launcher.clusters",)) == [
        "notebook_launcher/launch/notebook.py imports notebook_launcher.clusters.launching",
        "notebook_launcher/launch/notebook.py imports notebook_launcher.clusters.launching.cluster_run",
    ]
    assert _launch_runtime_violations() == [
        "notebook_launcher/launch/faults/watch.py imports notebook_launcher.runtime.world",
        "notebook_launcher/launch/faults/watch.py imports notebook_launcher.runtime.world.collective_log",
        "notebook_launcher/launch/worker/entry.py imports notebook_launcher.runtime",
        "notebook_launcher/launch/worker/entry.py imports notebook_launcher.runtime.telemetry",
    ]
    with pytest.raises(AssertionError, match="records/activity.py imports torch"):
        test_records_stand_alone()


# ---- the module graph: no circles, function-level imports counted ------------------------------
MAX_MODULES_PER_FOLDER = 12


def _edges(path: Path, known: set[str]) -> set[str]:
    """The package modules `path` imports, at any level. `from pkg import name` counts as importing
    the submodule pkg.name when there is one, else pkg itself."""
    found = set()
    for name, names, _ in _import_statements(path):
        submodules = {f"{name}.{taken}" for taken in names} & known
        found |= submodules
        if not names or len(submodules) < len(names):
            found.add(name)
    return (found & known) - {_dotted(path)}


def _graph() -> dict[str, set[str]]:
    modules = {_dotted(path): path for path in _modules()}
    return {name: _edges(path, set(modules)) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle per strongly connected group of modules, as a path that comes back to its start."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        order[node] = low[node] = len(order)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in order:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], order[nxt])
        if low[node] == order[node]:
            group = set(stack[stack.index(node) :])
            del stack[stack.index(node) :]
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in order:
            visit(node)
    return [_circle_in(graph, group) for group in groups]


def _circle_in(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """A shortest way from the group's first module back to itself, inside the group."""
    start = min(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt_frontier = []
        for node in frontier:
            for nxt in sorted(graph[node] & group):
                if nxt == start:
                    return [*paths[node], start]
                if nxt not in paths:
                    paths[nxt] = [*paths[node], nxt]
                    nxt_frontier.append(nxt)
        frontier = nxt_frontier
    raise AssertionError(f"no circle found in {sorted(group)}")


def test_no_import_circles():
    """A late import that only dodges a circle means the rooms are cut in the wrong place."""
    circles = [" -> ".join(circle) for circle in _cycles(_graph())]
    assert circles == [], "import circles (function-level imports counted):\n" + "\n".join(circles)


def _oversized_folders() -> list[str]:
    folders: dict[Path, int] = {}
    for path in _modules():
        if path.name != "__init__.py":
            folders[path.parent] = folders.get(path.parent, 0) + 1
    return sorted(
        f"{folder.relative_to(PACKAGE.parent)} holds {count} modules (limit {MAX_MODULES_PER_FOLDER})"
        for folder, count in folders.items()
        if count > MAX_MODULES_PER_FOLDER
    )


def test_no_folder_holds_more_than_twelve_modules():
    """One concern per folder: a newcomer must see which files belong together."""
    assert _oversized_folders() == []


def _imports_outside(room: str, allowed: tuple[str, ...]) -> list[str]:
    """Package modules a room imports (any level) that are neither in the room nor allowed."""
    modules = {_dotted(path): path for path in _modules()}
    allowed = (f"notebook_launcher.{room}", *(f"notebook_launcher.{a}" for a in allowed))
    bad = []
    for name, path in modules.items():
        if _room(name) != room:
            continue
        for target in _edges(path, set(modules)):
            if not any(target == a or target.startswith(a + ".") for a in allowed):
                bad.append(f"{path.relative_to(PACKAGE.parent)} imports {target}")
    return sorted(bad)


def test_system_knows_only_the_machine():
    """system/ (hardware, network, store, signals, schedulers, host memory) is the floor: it imports
    only errors and itself, and no torch at module level (the kernel and the CLI use it torch-free)."""
    assert _imports_outside("system", ("errors", "records.names")) == []
    assert _violations("system", ("torch",), module_level_only=True) == []


def test_estimate_stands_on_system_config_and_errors():
    assert _imports_outside("estimate", ("system", "errors", "config", "records.names")) == []


# ---- each rule above fails on a planted violation -----------------------------------------------
def _plant(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: dict[str, str]) -> None:
    fake = tmp_path / "notebook_launcher"
    for name, text in {"__init__.py": "", **files}.items():
        (fake / name).parent.mkdir(parents=True, exist_ok=True)
        (fake / name).write_text(text)
    monkeypatch.setattr(__import__(__name__), "PACKAGE", fake)


def test_the_checker_sees_a_circle_through_a_function_level_import(tmp_path, monkeypatch):
    _plant(
        tmp_path,
        monkeypatch,
        {
            "launch/__init__.py": "from .notebook import go\n",
            "launch/notebook.py": "def go():\n    from ..widgets import panel\n",
            "widgets/__init__.py": "",
            "widgets/panel.py": "from .. import launch\n",
        },
    )
    assert _cycles(_graph()) == [
        [
            "notebook_launcher.launch",
            "notebook_launcher.launch.notebook",
            "notebook_launcher.widgets.panel",
            "notebook_launcher.launch",
        ]
    ]
    with pytest.raises(AssertionError, match="launch.notebook -> notebook_launcher.widgets.panel"):
        test_no_import_circles()


def test_the_checker_sees_an_oversized_folder(tmp_path, monkeypatch):
    _plant(tmp_path, monkeypatch, {f"launch/m{i}.py": "" for i in range(13)} | {"launch/__init__.py": ""})
    assert _oversized_folders() == ["notebook_launcher/launch holds 13 modules (limit 12)"]
    with pytest.raises(AssertionError):
        test_no_folder_holds_more_than_twelve_modules()


def test_the_checker_sees_rooms_reaching_too_far(tmp_path, monkeypatch):
    _plant(
        tmp_path,
        monkeypatch,
        {
            "errors.py": "",
            "config/__init__.py": "",
            "launch/__init__.py": "",
            "system/__init__.py": "",
            "system/hardware.py": "import torch\nfrom ..errors import X\n",
            "system/network.py": "def f():\n    from ..config import LaunchConfig\n",
            "estimate/__init__.py": "",
            "estimate/memory.py": "from ..system import hardware\nfrom .. import launch\n",
            "runtime/__init__.py": "",
            "runtime/bad.py": "def f():\n    from ..clusters import driver\n",
            "launch/notebook.py": "def f():\n    from ..widgets import RunView\n",
        },
    )
    assert _imports_outside("system", ("errors", "records.names")) == [
        "notebook_launcher/system/network.py imports notebook_launcher.config"
    ]
    assert _violations("system", ("torch",), module_level_only=True) == [
        "notebook_launcher/system/hardware.py imports torch"
    ]
    assert _imports_outside("estimate", ("system", "errors", "config", "records.names")) == [
        "notebook_launcher/estimate/memory.py imports notebook_launcher.launch"
    ]
    for rule in (
        test_system_knows_only_the_machine,
        test_estimate_stands_on_system_config_and_errors,
        test_the_runtime_never_needs_a_notebook_or_a_launcher,
        test_the_launcher_reaches_widgets_only_through_the_view_factory,
        test_only_the_public_face_and_interactive_import_widgets,
    ):
        with pytest.raises(AssertionError):
            rule()


# ---- docs/architecture.md names every module, and only modules that exist ----------------------
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"


def _tree_names(text: str) -> set[str]:
    """Every `name.py` the tree in architecture.md mentions (the block that starts at the package)."""
    start = text.index("```\nnotebook_launcher/")
    block = text[start : text.index("```", start + 4)]
    return {name.rsplit("/", 1)[-1] for name in re.findall(r"[\w/]*\w\.py\b", block)}


def _tree_drift(text: str) -> list[str]:
    modules = [p for p in _modules() if p.name != "__init__.py"]
    named = _tree_names(text)
    unnamed = [f"{p.relative_to(PACKAGE.parent)} is not in the tree" for p in modules if p.name not in named]
    existing = {p.name for p in modules} | {"__init__.py"}
    gone = [f"{name} is in the tree but no module has that name" for name in named - existing]
    return sorted(unnamed + gone)


def test_the_architecture_tree_names_every_module_and_nothing_else():
    """docs/architecture.md is drawn from the code: a new module must be placed in the tree, and a
    removed or renamed one must leave it."""
    assert _tree_drift(ARCHITECTURE.read_text()) == []


def test_the_checker_sees_a_tree_out_of_date(tmp_path, monkeypatch):
    _plant(tmp_path, monkeypatch, {"launch/planning.py": "", "launch/new_room.py": ""})
    text = "```\nnotebook_launcher/\n  launch/\n    planning.py, gone.py\n```\n"
    assert _tree_drift(text) == [
        "gone.py is in the tree but no module has that name",
        "notebook_launcher/launch/new_room.py is not in the tree",
    ]


# ---- one resolution of a launch ------------------------------------------------------------------
# The rules a launch is decided by: defined in system/ (ports, threads) or resolution/, and called
# only from resolution/ — no entry decides them again.
RESOLUTION_RULES = {
    "rendezvous_port": "notebook_launcher.system.network",
    "threads_per_rank": "notebook_launcher.system.hardware",
    "choose_start_method": "notebook_launcher.resolution.start_method",
    "count_processes": "notebook_launcher.resolution.processes",
    "single_process_rule": "notebook_launcher.resolution.processes",
    "check_gpu_ids": "notebook_launcher.resolution.processes",
}


def _rules_decided_outside_resolution() -> list[str]:
    bad = []
    for path in _modules():
        module = _dotted(path)
        if _room(module) == "resolution":
            continue
        for name, names, _ in _import_statements(path):
            bad += [
                f"{path.relative_to(PACKAGE.parent)} takes {taken} from {name}"
                for taken in names
                if RESOLUTION_RULES.get(taken) == name
            ]
    return sorted(bad)


def test_one_resolution_decides_every_launch():
    """resolution/ decides a launch for every entry, from config, system and errors only, without
    torch anywhere in it; its rules (ports, threads, start method, processes, the single-process
    rule, gpu_ids) are called from nowhere else."""
    assert _imports_outside("resolution", ("config", "system", "errors", "records.names")) == []
    assert _violations("resolution", ("torch",)) == []
    assert _rules_decided_outside_resolution() == []


def test_the_checker_sees_a_rule_decided_twice(tmp_path, monkeypatch):
    _plant(
        tmp_path,
        monkeypatch,
        {
            "errors.py": "",
            "system/__init__.py": "",
            "system/network.py": "",
            "resolution/__init__.py": "",
            "resolution/resolve.py": "def f():\n    import torch\nfrom ..launch import planning\n",
            "cli/torchrun.py": "from ..system.network import rendezvous_port\n",
            "launch/__init__.py": "",
            "launch/planning.py": "",
        },
    )
    assert _imports_outside("resolution", ("config", "system", "errors", "records.names")) == [
        "notebook_launcher/resolution/resolve.py imports notebook_launcher.launch.planning"
    ]
    assert _violations("resolution", ("torch",)) == ["notebook_launcher/resolution/resolve.py imports torch"]
    assert _rules_decided_outside_resolution() == [
        "notebook_launcher/cli/torchrun.py takes rendezvous_port from notebook_launcher.system.network"
    ]
    with pytest.raises(AssertionError):
        test_one_resolution_decides_every_launch()


# ---- launch's rooms hold one side --------------------------------------------------------------
LAUNCH_SUBROOMS = ("cell", "faults", "supervise", "warm", "worker")


def _launch_subroom_edges() -> set[tuple[str, str]]:
    """(from, to) for every import between two of launch's sub-rooms, at any level."""
    modules = {_dotted(path): path for path in _modules()}

    def subroom(module: str) -> str | None:
        parts = module.split(".")
        return parts[2] if len(parts) > 3 and parts[1] == "launch" and parts[2] in LAUNCH_SUBROOMS else None

    edges = set()
    for name, path in modules.items():
        source = subroom(name)
        for target in _edges(path, set(modules)):
            goal = subroom(target)
            if source and goal and source != goal:
                edges.add((source, goal))
    return edges


def _launch_sides_mixed() -> list[str]:
    edges = _launch_subroom_edges()
    both = [
        f"launch/{a} and launch/{b} import each other" for a, b in sorted(edges) if a < b and (b, a) in edges
    ]
    child = [
        f"launch/worker (the child's side) imports launch/{b}" for a, b in sorted(edges) if a == "worker"
    ]
    return both + child


def test_launch_rooms_hold_one_side():
    """worker/ is the child's side and imports none of the kernel's rooms; no two sub-rooms of launch/
    import each other (the restart driver in faults/ drives supervise/, never the other way)."""
    assert _launch_sides_mixed() == []


def test_the_checker_sees_sides_mixed(tmp_path, monkeypatch):
    _plant(
        tmp_path,
        monkeypatch,
        {
            "launch/__init__.py": "",
            "launch/worker/__init__.py": "",
            "launch/worker/entry.py": "def f():\n    from ..supervise import stall\n",
            "launch/supervise/__init__.py": "",
            "launch/supervise/stall.py": "from ..worker import entry\n",
            "launch/faults/__init__.py": "",
            "launch/faults/restarts.py": "from ..supervise import stall\n",
        },
    )
    assert _launch_sides_mixed() == [
        "launch/supervise and launch/worker import each other",
        "launch/worker (the child's side) imports launch/supervise",
    ]
    with pytest.raises(AssertionError):
        test_launch_rooms_hold_one_side()


# ---- what launch/ offers the rooms beside it --------------------------------------------------
LAUNCH_USERS = ("clusters", "interactive", "widgets")


def _declared(init: Path, name: str) -> list[str] | None:
    """The list or tuple of strings assigned to `name` in a package's __init__, read with ast."""
    if not init.exists():
        return None
    for node in ast.parse(init.read_text()).body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        if any(isinstance(t, ast.Name) and t.id == name for t in targets) and node.value is not None:
            return [e.value for e in getattr(node.value, "elts", []) if isinstance(e, ast.Constant)]
    return None


def _launch_used_beyond_its_face() -> list[str]:
    """Imports from clusters/, interactive/ and widgets/ into launch/ that launch does not offer:
    a module at launch's top must be in launch/__init__'s OFFERED_MODULES, a module of a sub-room in
    that sub-room's __all__."""
    launch = PACKAGE / "launch"
    offered_top = set(_declared(launch / "__init__.py", "OFFERED_MODULES") or ())
    bad = []
    for path in _modules():
        if _room(_dotted(path)) not in LAUNCH_USERS:
            continue
        for module, names, _ in _import_statements(path):
            parts = module.split(".")
            if parts[:2] != ["notebook_launcher", "launch"]:
                continue
            if len(parts) == 2:  # from ..launch import x: a module at launch's top, or a name of its face
                bad += [
                    f"{path.relative_to(PACKAGE.parent)} imports launch's {m} ({module})"
                    for m in names
                    if (launch / f"{m}.py").exists() and m not in offered_top
                ]
                continue
            first = parts[2]
            if (launch / first).is_dir():
                offered = set(_declared(launch / first / "__init__.py", "__all__") or ())
                taken = [parts[3]] if len(parts) > 3 else names
                missing = [m for m in taken if m not in offered]
            else:
                missing = [] if first in offered_top else [first]
            bad += [f"{path.relative_to(PACKAGE.parent)} imports launch's {m} ({module})" for m in missing]
    return sorted(bad)


def test_the_rooms_beside_launch_use_only_what_it_offers():
    """clusters/, interactive/ and widgets/ import from launch/ only the modules it declares: its
    top's OFFERED_MODULES and each sub-room's __all__ (a change inside launch/ knows who it affects)."""
    assert _launch_used_beyond_its_face() == []


def test_the_checker_sees_launch_used_beyond_its_face(tmp_path, monkeypatch):
    _plant(
        tmp_path,
        monkeypatch,
        {
            "launch/__init__.py": 'OFFERED_MODULES = ("events",)\n',
            "launch/events.py": "",
            "launch/planning.py": "",
            "launch/worker/__init__.py": '__all__ = ["channel"]\n',
            "launch/worker/channel.py": "",
            "launch/worker/detach.py": "",
            "clusters/__init__.py": "",
            "clusters/node.py": (
                "from ..launch import events, planning\nfrom ..launch.planning import plan\n"
                "from ..launch.worker import channel, detach\nfrom ..launch.worker.channel import x\n"
            ),
        },
    )
    assert _launch_used_beyond_its_face() == [
        "notebook_launcher/clusters/node.py imports launch's detach (notebook_launcher.launch.worker)",
        "notebook_launcher/clusters/node.py imports launch's planning (notebook_launcher.launch)",
        "notebook_launcher/clusters/node.py imports launch's planning (notebook_launcher.launch.planning)",
    ]
    with pytest.raises(AssertionError):
        test_the_rooms_beside_launch_use_only_what_it_offers()
