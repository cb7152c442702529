#!/usr/bin/env bash
# Build a release of notebook_launcher, check it, and tag it. It uploads nothing: no release is
# published anywhere yet (docs/releasing.md has the versioning rule and the steps).
#
#   bash scripts/release.sh            # build dist/*, check them, tag vX.Y.Z (a clean tree only)
#   bash scripts/release.sh --no-tag   # build and check only (any tree)
#
# PYTHON picks the interpreter that builds (default: the project's .venv, else python3); it needs
# the `build` package (in the test extra). The check installs the wheel into a fresh venv without
# its dependencies and borrows them from PYTHON's environment, so nothing (no torch) is downloaded;
# tests/test_packaging.py installs the wheel with its real dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."

TAG_IT=1
case "${1:-}" in
    "") ;;
    --no-tag) TAG_IT=0 ;;
    *) echo "usage: bash scripts/release.sh [--no-tag]" >&2; exit 2 ;;
esac
if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi

fail() { echo "release: $*" >&2; exit 1; }

VERSION=$("$PYTHON" -c 'import runpy; print(runpy.run_path("notebook_launcher/_version.py")["__version__"])')
TAG="v$VERSION"
[[ "$VERSION" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "version '$VERSION' in notebook_launcher/_version.py is not X.Y.Z"
grep -qx "## $VERSION" CHANGELOG.md || fail "CHANGELOG.md has no '## $VERSION' heading: list this release's changes under it"
# Lines under '## Unreleased' belong to this release: fold them into '## $VERSION' before tagging.
unreleased=$(awk '/^## /{inside = ($0 == "## Unreleased"); next} inside && /^- /' CHANGELOG.md)
if [ "$TAG_IT" = 1 ]; then
    [ -z "$unreleased" ] || fail "CHANGELOG.md still has lines under '## Unreleased': move them under '## $VERSION'"
    [ -z "$(git status --porcelain)" ] || fail "the working tree has uncommitted changes: commit them, or use --no-tag"
    ! git rev-parse -q --verify "refs/tags/$TAG" >/dev/null || fail "tag $TAG exists already: bump the version"
fi

echo "release: building notebook_launcher $VERSION"
rm -rf dist
CHECK=$(mktemp -d)
trap 'rm -rf "$CHECK"' EXIT
"$PYTHON" -m build --sdist --wheel --outdir dist . >"$CHECK/build.log" 2>&1 || { cat "$CHECK/build.log" >&2; fail "python -m build failed (its output above)"; }
WHEEL="dist/notebook_launcher-$VERSION-py3-none-any.whl"
SDIST="dist/notebook_launcher-$VERSION.tar.gz"
[ -f "$WHEEL" ] && [ -f "$SDIST" ] || fail "expected $WHEEL and $SDIST, got: $(ls dist)"

# What each archive must hold: the license, the typing marker, the CLI's entry point, no tests.
"$PYTHON" - "$WHEEL" "$SDIST" "$VERSION" <<'EOF' || fail "an archive misses something (above)"
import sys, tarfile, zipfile

wheel, sdist, version = sys.argv[1:]
names = zipfile.ZipFile(wheel).namelist()
info = f"notebook_launcher-{version}.dist-info"
needed = ["notebook_launcher/__init__.py", "notebook_launcher/py.typed", f"{info}/licenses/LICENSE", f"{info}/entry_points.txt"]
missing = [n for n in needed if n not in names]
strays = [n for n in names if n.startswith("tests/")]
source = tarfile.open(sdist).getnames()
missing += [n for n in ("LICENSE", "pyproject.toml", "README.md") if f"notebook_launcher-{version}/{n}" not in source]
for problem in [f"missing: {n}" for n in missing] + [f"not meant to ship: {n}" for n in strays]:
    print(problem, file=sys.stderr)
sys.exit(1 if missing or strays else 0)
EOF

# Install the wheel in a fresh venv and ask it its version, away from this checkout.
"$PYTHON" -m venv "$CHECK/venv" || fail "cannot make a venv (Debian: apt-get install python3-venv)"
"$CHECK/venv/bin/python" -m pip install --quiet --no-deps --no-index "$WHEEL" || fail "the wheel does not install"
# the dependencies come from PYTHON's environment: its site-packages appended to the venv's path
"$PYTHON" -c 'import site, sysconfig; print("\n".join(dict.fromkeys([sysconfig.get_path("purelib"), sysconfig.get_path("platlib")])))' \
    >"$("$CHECK/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/release_check_deps.pth"
got=$(cd "$CHECK" && venv/bin/python -c 'import notebook_launcher as nl; print(nl.__version__, nl.__file__)')
case "$got" in
    "$VERSION $CHECK/venv/"*) ;;
    *) fail "the installed wheel answered '$got', expected version $VERSION from $CHECK/venv" ;;
esac
cli=$(cd "$CHECK" && venv/bin/notebook-launcher --version)
[ "$cli" = "notebook-launcher $VERSION" ] || fail "notebook-launcher --version printed '$cli', expected 'notebook-launcher $VERSION'"
echo "release: checked $WHEEL and $SDIST (installed in a fresh venv: import and '$cli')"
[ -z "$unreleased" ] || echo "release: note: CHANGELOG.md has lines under '## Unreleased' (not part of $VERSION's notes)"

if [ "$TAG_IT" = 1 ]; then
    git tag -a "$TAG" -m "notebook_launcher $VERSION"
    echo "release: tagged $TAG. Nothing was uploaded; dist/ holds the files (docs/releasing.md)."
else
    echo "release: not tagged (--no-tag)"
fi
