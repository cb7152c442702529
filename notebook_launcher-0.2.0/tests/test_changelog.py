"""A public name or a CLI flag added since the last release has a CHANGELOG line, so users learn of
it; the version CHANGELOG.md describes is the package's.

tests/changelog_baseline.json records the last release's public names (`notebook_launcher.__all__`,
the lazy face's names included) and CLI flags. `python tests/test_changelog.py --record` rewrites it
from this checkout, as a release does (docs/releasing.md).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = Path(__file__).with_name("changelog_baseline.json")
CHANGELOG = ROOT / "CHANGELOG.md"
COMMANDS = ("launch", "config", "env", "test", "estimate-memory", "merge-weights")

_SURFACE = f"""
import contextlib, io, json, re
import notebook_launcher
from notebook_launcher.cli import main

flags = set()
for command in {COMMANDS!r}:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main([command, "--help"])
    flags |= {{f.replace("-", "_").lstrip("_") for f in re.findall(r"(?<![\\w-])--[a-z][a-z0-9_-]*", out.getvalue())}}
print(json.dumps({{"names": sorted(notebook_launcher.__all__), "flags": sorted("--" + f for f in flags)}}))
"""


def surface(root: Path = ROOT) -> dict[str, list[str]]:
    """The public names and CLI flags of the checkout at `root`, read in a fresh interpreter."""
    out = subprocess.run(
        [sys.executable, "-c", _SURFACE], cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return json.loads(out.stdout)


def unannounced(current: dict[str, list[str]], baseline: dict, changelog: str) -> list[str]:
    """Names and flags of `current` that the baseline lacks and CHANGELOG.md never names in backticks."""
    named = set(re.findall(r"`([^`]+)`", changelog))
    words = {w for text in named for w in re.findall(r"--?[\w-]+|\w+", text)}
    new = [n for n in current["names"] if n not in baseline["names"]]
    new += [f for f in current["flags"] if f not in baseline["flags"]]
    return [item for item in new if item not in words and item.replace("_", "-") not in words]


def test_every_new_public_name_and_flag_has_a_changelog_line():
    baseline = json.loads(BASELINE.read_text())
    missing = unannounced(surface(), baseline, CHANGELOG.read_text())
    assert not missing, (
        f"added since {baseline['release']} without a CHANGELOG.md line naming them in backticks: {missing}. "
        "Add a line under '## Unreleased' saying what each is for."
    )


def test_a_planted_name_without_a_line_is_caught():
    baseline = {"names": ["notebook_launch"], "flags": ["--num_processes"]}
    current = {"names": ["notebook_launch", "brand_new"], "flags": ["--num_processes", "--brand_new_flag"]}
    assert unannounced(current, baseline, "- `notebook_launch` ...") == ["brand_new", "--brand_new_flag"]
    announced = "- `brand_new(x)` does ...\n- `notebook-launcher launch --brand-new-flag N` ..."
    assert unannounced(current, baseline, announced) == []


def test_the_changelog_describes_this_version():
    from notebook_launcher import __version__

    headings = re.findall(r"^## (.+)$", CHANGELOG.read_text(), re.M)
    versions = [h for h in headings if h != "Unreleased"]
    assert versions and versions[0] == __version__, (
        f"CHANGELOG.md's newest version is {versions[:1]}, notebook_launcher/_version.py says {__version__}"
    )


if __name__ == "__main__" and sys.argv[1:] == ["--record"]:
    from notebook_launcher import __version__

    BASELINE.write_text(json.dumps({"release": __version__, **surface()}, indent=1) + "\n")
    print(f"recorded {BASELINE.name} for {__version__}")
