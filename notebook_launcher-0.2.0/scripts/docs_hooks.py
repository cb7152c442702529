"""MkDocs hooks (mkdocs.yml): the pages that live outside docs/ and the generated reference.

Adds the README as the home page, CHANGELOG.md and benchmarks/README.md (read where they are, so
nothing is copied into docs/; the notebooks come in through the docs/examples link), one API page per public face (each public name rendered
by mkdocstrings from its docstring, found statically: no torch needed) and the CLI page (every
command's --help). Links written for GitHub (`docs/cli.md`, `../notebooks/x.ipynb`) are rewritten to
the site's pages; a link to anything else (a file the site does not hold, or a broken link) is left
alone for `--strict` to fail on: the site is read from a checkout, with no repository to point at.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import io
import posixpath
import re
import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
OUTSIDE = {
    "index.md": "README.md",
    "CHANGELOG.md": "CHANGELOG.md",
    "benchmarks/README.md": "benchmarks/README.md",
}
FACES = {
    "notebook_launcher": "notebook_launcher",
    "utils": "notebook_launcher.utils",
    "state": "notebook_launcher.state",
    "tracking": "notebook_launcher.tracking",
}
LINK = re.compile(r"(\]\()([\w./-]+\.[A-Za-z]+|[\w./-]+/)(#[\w-]*)?(\))")


def on_files(files: Files, config: Any) -> Files:
    """Add the pages read from outside docs/ and the generated reference."""
    if str(ROOT) not in sys.path:  # the faces come from this checkout (they import no torch); here, since
        sys.path.insert(0, str(ROOT))  # MkDocs restores sys.path after loading a hook module
    for uri, source in OUTSIDE.items():
        files.append(File.generated(config, uri, abs_src_path=str(ROOT / source)))
    for page, module in FACES.items():
        files.append(File.generated(config, f"reference/{page}.md", content=api_page(module)))
    files.append(File.generated(config, "reference/cli.md", content=cli_page()))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """GitHub-relative links -> the site's pages, or the repository for files the site lacks."""
    uri = page.file.src_uri
    source = OUTSIDE.get(uri) or (uri if uri.startswith("reference/") else f"docs/{uri}")
    here = posixpath.dirname(source)
    site_of = {v: k for k, v in OUTSIDE.items()}

    def rewrite(match: re.Match[str]) -> str:
        target = posixpath.normpath(posixpath.join(here, match[2]))
        site = site_of.get(target) or (target[5:] if target.startswith("docs/") else target)
        site = "examples/" + site[10:] if site.startswith("notebooks/") else site
        if files.get_file_from_path(site) is None:  # left as written: `mkdocs build --strict` fails on it
            return match[0]
        new = posixpath.relpath(site, posixpath.dirname(uri) or ".")
        return f"{match[1]}{new}{match[3] or ''}{match[4]}"

    return LINK.sub(rewrite, markdown)


# ------------------------------------------------------------------ generated pages


def public_names(module: str) -> dict[str, str]:
    """Each public name of a face -> the module mkdocstrings reads it from (found without torch)."""
    path = ROOT / (module.replace(".", "/") + (".py" if module != "notebook_launcher" else "/__init__.py"))
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    where: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module:
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            source = f"{base}.{node.module}" if node.level else node.module
            where.update({a.asname or a.name: source for a in node.names})
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            where[node.name] = module
    face = importlib.import_module(module)
    lazy: dict[str, str] = getattr(face, "_LAZY", {})
    names = face.__all__
    star = next((source for name, source in where.items() if name == "*"), None)  # `from X import *`
    return {name: lazy.get(name) or where.get(name) or star or module for name in sorted(names)}


def api_page(module: str) -> str:
    doc = importlib.import_module(module).__doc__ if module != "notebook_launcher.tracking" else None
    lines = [f"# `{module}`", "", (doc or "").strip(), ""]
    if module == "notebook_launcher.tracking":
        lines[2] = "Accelerate's `accelerate.tracking` import path: the tracker classes and their helpers."
    made_at_import = []  # names a module makes in a loop (the is_*_available probes): no source to render
    for name, source in public_names(module).items():
        if not _defined_in_source(source, name):
            made_at_import.append(name)
            continue
        lines += [f"::: {source}.{name}", "    options:", "      heading_level: 2", ""]
    if made_at_import:
        lines += ["## Availability probes", ""]
        for name in made_at_import:
            doc = (importlib.import_module(module).__getattr__(name).__doc__ or "").strip().splitlines()
            lines.append(f"- `{name}()`: {doc[0] if doc else ''}")
        lines.append("")
    return "\n".join(lines)


def _defined_in_source(source: str, name: str) -> bool:
    """Whether `name` is written in `source`'s file (a def, a class, an assignment or an import)."""
    spec = importlib.util.find_spec(source)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return True
    tree = ast.parse(Path(spec.origin).read_text())
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == name for t in node.targets):
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
            (a.asname or a.name.split(".")[0]) == name or a.name == "*" for a in node.names
        ):
            return True
    return False


def cli_page() -> str:
    from notebook_launcher.cli.main import COMMANDS, OVERVIEW, main

    lines = ["# Command line: `notebook-launcher`", "", "Generated from the commands' own `--help`.", ""]
    lines += ["```text", OVERVIEW.rstrip(), "```", ""]
    for command in COMMANDS:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            main([command, "--help"])
        lines += [f"## `notebook-launcher {command}`", "", "```text", out.getvalue().rstrip(), "```", ""]
    return "\n".join(lines)
