#!/usr/bin/env bash
# Install notebook_launcher with everything its tests and notebooks need, on a fresh Debian machine.
# CPU torch is pinned first: an unpinned torch would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}

"$PYTHON" -m pip install --quiet "torch==${TORCH_VERSION}"
"$PYTHON" -m pip install --quiet -e ".[test,docs]"  # docs: mkdocs for .ci/run's site build

# DeepSpeed JIT-compiles two CPU ops on first use (~3 min); build them once here, not inside a test.
# They are cached in ~/.cache/torch_extensions.
DS_ACCELERATOR=cpu "$PYTHON" -c "from deepspeed.accelerator import get_accelerator as a; \
[a().create_op_builder(n).load() for n in ('ShareMemCommBuilder', 'CPUAdamBuilder')]" >/dev/null

# The browser tests drive Debian's Chromium through Playwright (which cannot download browsers here).
if [ ! -x /usr/bin/chromium ] && [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
# The multi-machine tests join two network namespaces (`ip netns`, Debian's iproute2) and the MPI
# test runs Debian's Open MPI; without them those tests skip and say why.
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
    missing=""
    command -v ip >/dev/null || missing="$missing iproute2"
    command -v mpirun >/dev/null || missing="$missing openmpi-bin"
    if [ -n "$missing" ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
            --no-install-recommends $missing >/dev/null
    fi
fi
echo "notebook_launcher installed: $("$PYTHON" -c 'import notebook_launcher, torch; print(notebook_launcher.__version__, "torch", torch.__version__)')"
