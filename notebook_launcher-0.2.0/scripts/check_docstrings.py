"""Every public name of the four faces has a docstring (the API reference renders it; mkdocstrings
itself renders an empty entry without complaint). Public methods and properties of public classes
without one are listed as notes, not failures (many are Accelerate's attributes, documented there).

Run by .ci/run next to `mkdocs build --strict`; exit status 1 lists the names that lack one.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
FACES = (
    "notebook_launcher",
    "notebook_launcher.utils",
    "notebook_launcher.state",
    "notebook_launcher.tracking",
)


def own(obj: object) -> bool:
    return (getattr(obj, "__module__", "") or "").startswith("notebook_launcher")


def missing() -> tuple[list[str], list[str]]:
    """(public names without a docstring, public members of public classes without one)."""
    lacking: set[str] = set()
    members: set[str] = set()
    for module in FACES:
        face = importlib.import_module(module)
        for name in face.__all__:
            obj = getattr(face, name)
            if not (inspect.isclass(obj) or callable(obj)) or not own(obj):
                continue  # constants, and Accelerate-compatible aliases of torch's own objects
            if not (obj.__doc__ or "").strip():
                lacking.add(f"{module}.{name}")
            if inspect.isclass(obj):
                members.update(f"{module}.{name}.{m}" for m in _undocumented_members(obj))
    return sorted(lacking), sorted(members)


def _undocumented_members(cls: type) -> list[str]:
    found = []
    for name, member in vars(cls).items():
        if name.startswith("_"):
            continue
        target = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
        if not callable(target):
            continue
        if not any(
            (getattr(getattr(base, name, None), "__doc__", None) or "").strip() for base in cls.__mro__
        ):
            found.append(name)
    return found


if __name__ == "__main__":
    lacking, members = missing()
    for name in lacking:
        print(f"no docstring: {name}")
    print(f"check_docstrings: {len(lacking)} public name(s) without a docstring; note: {len(members)} public")
    print("methods/properties of public classes without one (`-v` lists them)")
    if "-v" in sys.argv:
        print("\n".join(members))
    sys.exit(1 if lacking else 0)
