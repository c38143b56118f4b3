#!/usr/bin/env bash
# Configures and builds tensorhub into ${TH_BUILD_DIR:-build}.
# Extra arguments go to cmake (e.g. -DTH_SANITIZE=address).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${TH_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=${TH_BUILD_TYPE:-RelWithDebInfo} "$@" >/dev/null
cmake --build "$build" -j "${TH_JOBS:-$(nproc)}"
