#!/usr/bin/env bash
# Install torch into the Python given as $1 — the one place that decides which build a machine gets:
#   - a machine with an NVIDIA driver (nvidia-smi or /proc/driver/nvidia): PyPI's torch, the CUDA
#     build (2.6 GB of downloads for 2.13.0: torch plus its nvidia-* and triton wheels);
#   - any other machine: the CPU build (192 MB for 2.13.0), `torch==X+cpu`. pip first looks where it is
#     configured to look (a machine whose pip points at a local folder of CPU wheels uses that one,
#     and nothing is downloaded); otherwise from PyTorch's own CPU wheel index,
#     https://download.pytorch.org/whl/cpu (PyPI has no CPU-only build for Linux x86-64).
# Used by scripts/install.sh, by tests/fresh_venv.py (the installed-wheel test's venv) and by .ci/run:
# a second venv gets its torch from pip's cache, never downloaded twice.
#   bash scripts/install_torch.sh PYTHON [VERSION]      (VERSION defaults to $TORCH_VERSION or 2.13.0)
# TORCH_BUILD=pypi takes PyPI's build whatever the machine (its CUDA build runs on a CPU too): CI's
# oldest-versions job uses it for a torch that no local folder holds.
set -euo pipefail

PYTHON=${1:?usage: install_torch.sh PYTHON [VERSION]}
VERSION=${2:-${TORCH_VERSION:-2.13.0}}
CPU_INDEX=https://download.pytorch.org/whl/cpu
# Byte-compiled at install, as pip does by default: without .pyc files every new interpreter compiles
# torch, sympy and networkx again where it cannot write them (a read-only venv, PYTHONDONTWRITEBYTECODE),
# about 3 s of CPU for `import torch` instead of 1.5 s (issue 33; 15 s of CPU once, here).
# TORCH_NO_COMPILE=1 skips it: a throwaway venv that imports torch a few times (tests/fresh_venv.py).
pip=("$PYTHON" -m pip install --quiet)
if [ "${TORCH_NO_COMPILE:-}" = 1 ]; then pip+=(--no-compile); fi

if [ "${TORCH_BUILD:-}" = pypi ] || command -v nvidia-smi >/dev/null 2>&1 || [ -e /proc/driver/nvidia/version ]; then
    echo "install_torch: torch==$VERSION from PyPI (the CUDA build, 2.6 GB for 2.13.0; it runs on a CPU too)"
    "${pip[@]}" "torch==$VERSION"
elif "${pip[@]}" "torch==$VERSION+cpu" 2>/dev/null; then
    echo "install_torch: torch==$VERSION+cpu (CPU build) from pip's configured sources"
else
    echo "install_torch: no NVIDIA driver: torch==$VERSION+cpu (CPU build, 192 MB for 2.13.0) from $CPU_INDEX"
    "${pip[@]}" "torch==$VERSION+cpu" --extra-index-url "$CPU_INDEX"
fi
