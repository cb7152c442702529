"""docs/migrating-from-accelerate.md's table of names is true: every supported (or differing) name
imports from our module, every unsupported one raises an ImportError with advice, and every public
name of `accelerate`, `accelerate.utils`, `accelerate.state`, `accelerate.data_loader` and
`accelerate.tracking` is in the table."""

import importlib
import re
import types
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "migrating-from-accelerate.md"
ROW = re.compile(
    r"^\| `(accelerate(?:\.utils|\.state|\.tracking|\.data_loader|\.local_sgd)?)\.(\w+)` \| (supported|differs|not supported) \|"
)
OURS = {
    "accelerate": "notebook_launcher",
    "accelerate.utils": "notebook_launcher.utils",
    "accelerate.state": "notebook_launcher.state",
    "accelerate.tracking": "notebook_launcher.tracking",
    "accelerate.data_loader": "notebook_launcher.data_loader",
    "accelerate.local_sgd": "notebook_launcher.local_sgd",
}


def rows() -> list[tuple[str, str, str]]:
    found = [ROW.match(line) for line in DOC.read_text().splitlines()]
    return [m.groups() for m in found if m]


def test_the_table_is_there():
    assert len(rows()) > 90


@pytest.mark.parametrize("module, name, status", rows(), ids=[f"{m}.{n}" for m, n, _ in rows()])
def test_each_row_holds(module, name, status):
    ours = importlib.import_module(OURS[module])
    if status == "not supported":
        with pytest.raises(ImportError, match="does not support it: .+"):
            getattr(ours, name)
    else:
        assert getattr(ours, name) is not None


@pytest.mark.parametrize(
    "module",
    ["accelerate", "accelerate.utils", "accelerate.state", "accelerate.tracking", "accelerate.data_loader"],
)
def test_every_public_name_of_accelerate_is_in_the_table(module):
    theirs = importlib.import_module(module)
    public = {
        n
        for n in dir(theirs)
        if not n.startswith("_")
        and not isinstance(getattr(theirs, n), types.ModuleType)
        and (
            module in ("accelerate", "accelerate.utils")
            or getattr(getattr(theirs, n), "__module__", "") == module
        )
    }
    listed = {name for m, name, _ in rows() if m == module}
    assert sorted(public - listed) == []
