#!/usr/bin/env bash
# Configures and builds tensorhub into ${TH_BUILD_DIR:-build}.
# Extra arguments go to cmake (e.g. -DTH_SANITIZE=address).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${TH_BUILD_DIR:-build}
# TH_BUILD_TYPE (default RelWithDebInfo) sets the type of a new build
# directory; an existing one keeps its type unless TH_BUILD_TYPE is given.
type=()
if [ -n "${TH_BUILD_TYPE:-}" ] || [ ! -f "$build/CMakeCache.txt" ]; then
    type=(-DCMAKE_BUILD_TYPE="${TH_BUILD_TYPE:-RelWithDebInfo}")
fi
cmake -S . -B "$build" "${type[@]}" "$@" >/dev/null
cmake --build "$build" -j "${TH_JOBS:-$(nproc)}"
