#!/usr/bin/env bash
# Installs what building and testing tensorhub needs on Debian 12, when it is
# missing: Debian packages with apt-get, then the Python binding's test
# dependencies with pip (TH_SETUP_TORCH=0 leaves out torch and transformers,
# several GB). Safe to run again. Needs root (or sudo) only when a Debian
# package is missing.
set -euo pipefail

debs=(build-essential cmake pkg-config libucx-dev ucx-utils libnng-dev libflatbuffers-dev
      flatbuffers-compiler libgtest-dev nlohmann-json3-dev libmbedtls-dev libxxhash-dev iproute2 gdb python3 python3-pip
      etcd-server)
[ "${TH_SETUP_GO:-1}" = 1 ] && debs+=(golang-go)
# Headless Chromium for the live page's test (skipped without it).
[ "${TH_SETUP_CHROMIUM:-1}" = 1 ] && debs+=(chromium)
# The cluster benchmark's baselines (perf/cluster: MPI_Bcast, Redis) and plots.
[ "${TH_SETUP_CLUSTER:-1}" = 1 ] && debs+=(openmpi-bin libopenmpi-dev redis-server libhiredis-dev python3-matplotlib)

missing=()
for p in "${debs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# UCX 1.22 from PyPI (libucx-cu12, pinned): one-sided reads under peer error
# handling and shared memory between processes of one host. The build uses it
# when present (CMakeLists.txt, TH_UCX); TH_SETUP_UCX_WHEEL=0 keeps the
# system's UCX only.
ucx_wheel=1.22.0
if [ "${TH_SETUP_UCX_WHEEL:-1}" = 1 ] &&
    ! python3 -c "import importlib.metadata as m, sys; sys.exit(m.version('libucx-cu12') != '$ucx_wheel')" 2>/dev/null; then
    echo "setup: installing libucx-cu12==$ucx_wheel (pip)"
    # Debian's python3 refuses pip installs outside a virtual environment
    # (PEP 668); this is a build machine's interpreter, so install anyway.
    PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install -q --disable-pip-version-check "libucx-cu12==$ucx_wheel"
fi

# The Python binding's test dependencies, from PyPI with pip: numpy, pytest,
# and (TH_SETUP_TORCH=1, the default) the pinned torch and transformers its
# torch tests need. Only what is missing is installed.
"$(dirname "$0")/../bindings/python/install_test_deps.sh"
