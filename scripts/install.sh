#!/usr/bin/env bash
# Install notebook_launcher with everything its tests and notebooks need into a project venv, .venv,
# on a stock Debian or Ubuntu machine with only Python >= 3.10 and git (README's first command).
#
# What it does, in order (each step says so as it runs):
#   1. Debian's packages it needs, when they are missing, with apt-get as root or through sudo:
#      python3-venv (Debian and Ubuntu ship Python without venv/pip: PEP 668 forbids installing
#      into the system's Python), g++, ninja and the Python headers (DeepSpeed compiles two CPU ops),
#      iproute2 and openmpi-bin (the two-machine and MPI tests), Chromium (the browser tests; Debian
#      only: Ubuntu ships it as a snap, and those tests then skip, saying why).
#      Without root or sudo it installs none of these and says what is missing.
#   2. A venv at .venv (VENV=...), then torch through scripts/install_torch.sh (the CPU build on a
#      machine without an NVIDIA driver, from PyTorch's CPU wheel index; the CUDA build otherwise).
#   3. This package, editable, with its test and docs extras (CONSTRAINTS=file adds pip constraints:
#      CI's oldest-versions job), then DeepSpeed's two CPU ops, compiled once (~3 min).
# Afterwards: .venv/bin/python quickstart.py, .venv/bin/python -m pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
say() { echo "install.sh: $*"; }

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"
    elif command -v sudo >/dev/null 2>&1; then sudo "$@"
    else return 1
    fi
}
can_apt() { command -v apt-get >/dev/null 2>&1 && { [ "$(id -u)" = 0 ] || command -v sudo >/dev/null 2>&1; }; }
apt_updated=""
apt_install() {  # apt_install PACKAGE... ; returns non-zero (never exits) when it cannot
    can_apt || return 1
    if [ -z "$apt_updated" ]; then
        as_root apt-get -o DPkg::Lock::Timeout=600 update -qq || return 1
        apt_updated=1
    fi
    as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
        --no-install-recommends "$@" >/dev/null
}

command -v "$PYTHON" >/dev/null || { say "no $PYTHON: install Python >= 3.10 first"; exit 1; }
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
    || { say "$("$PYTHON" --version) is too old: notebook_launcher needs Python >= 3.10"; exit 1; }
PYVER=$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')

# ---- 1. Debian's packages
if ! "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null; then
    say "Python's venv module is missing: installing Debian's python3-venv (python$PYVER-venv)"
    apt_install "python$PYVER-venv" || apt_install python3-venv || {
        say "cannot install python3-venv (needs root or sudo): run 'sudo apt-get install python3-venv' and run this again"
        exit 1
    }
fi
HEADERS=$("$PYTHON" -c 'import os, sysconfig; print(os.path.join(sysconfig.get_paths()["include"], "Python.h"))')
if ! command -v g++ >/dev/null 2>&1 || ! command -v ninja >/dev/null 2>&1 || [ ! -e "$HEADERS" ]; then
    # DeepSpeed looks for `ninja` on PATH each time it loads an op (a venv's own ninja is on PATH only
    # once the venv is activated, and README's commands do not activate it)
    say "installing g++, ninja and the Python headers (DeepSpeed compiles its CPU ops)"
    apt_install g++ make ninja-build "python$PYVER-dev" || apt_install g++ make ninja-build python3-dev \
        || say "could not install g++/ninja/python3-dev: DeepSpeed's CPU ops will not be compiled, its tests fail"
fi
missing=""
command -v ip >/dev/null || missing="$missing iproute2"
command -v mpirun >/dev/null || missing="$missing openmpi-bin"
if [ -n "$missing" ]; then
    say "installing$missing (the two-machine and MPI tests)"
    apt_install $missing || say "could not install$missing: those tests skip, saying why"
fi
if [ ! -x /usr/bin/chromium ]; then
    if grep -qi '^ID=debian' /etc/os-release 2>/dev/null; then
        say "installing Debian's Chromium (the browser tests drive it through Playwright)"
        apt_install chromium || say "could not install chromium: the browser tests skip, saying why"
    else
        say "no /usr/bin/chromium (Debian's package; Ubuntu ships Chromium as a snap): the browser tests skip"
    fi
fi

# ---- 2. the venv and torch
if [ ! -x "$VENV/bin/python" ]; then
    say "creating the venv $VENV"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip  # Debian 12's pip 23.0 builds sdists the legacy way
fi
VPY="$VENV/bin/python"
if ! "$VPY" -c "import torch, sys; sys.exit(not torch.__version__.startswith('$TORCH_VERSION'))" 2>/dev/null; then
    bash scripts/install_torch.sh "$VPY" "$TORCH_VERSION"
fi

# ---- 3. this package and its test extras
constraints=()
[ -n "${CONSTRAINTS:-}" ] && constraints=(--constraint "$CONSTRAINTS")
say "installing notebook_launcher[test,docs] (editable) and what its tests need"
"$VPY" -m pip install --quiet "${constraints[@]}" -e ".[test,docs]"  # docs: mkdocs for .ci/run's site build

# DeepSpeed JIT-compiles two CPU ops on first use (~3 min); build them once here, not inside a test.
# They are cached in ~/.cache/torch_extensions. With the venv's bin first in PATH, as the suite has it
# (tests/conftest.py): ninja keeps the build only for the ninja that made it (the venv's pip ninja 1.13
# writes its log as v7, Debian's 1.11 as v5, and 1.13 starts over on a v5 log), so a build by the other
# one is redone in a test. The path is absolute: torch runs ninja from the build folder, where a
# relative .venv/bin finds nothing and Debian's /usr/bin/ninja builds instead.
if command -v g++ >/dev/null 2>&1 && [ -e "$HEADERS" ]; then
    say "compiling DeepSpeed's two CPU ops once (~3 min on 2 cores; cached in ~/.cache/torch_extensions)"
    PATH="$(cd "$(dirname "$VPY")" && pwd):$PATH" DS_ACCELERATOR=cpu "$VPY" -c "from deepspeed.accelerator import get_accelerator as a; \
[a().create_op_builder(n).load() for n in ('ShareMemCommBuilder', 'CPUAdamBuilder')]" >/dev/null
fi
say "done: $("$VPY" -c 'import notebook_launcher, torch; print("notebook_launcher", notebook_launcher.__version__, "torch", torch.__version__)') in $VENV"
