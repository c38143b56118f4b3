#!/usr/bin/env bash
# Configures and builds tensorhub into ${TH_BUILD_DIR:-build}.
# Extra arguments go to cmake (e.g. -DTH_SANITIZE=address).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${TH_BUILD_DIR:-build}
# TH_BUILD_TYPE sets the build type; without it a new build directory gets
# TH_NEW_BUILD_TYPE (default RelWithDebInfo) and an existing one keeps its type.
type=()
if [ -n "${TH_BUILD_TYPE:-}" ]; then
    type=(-DCMAKE_BUILD_TYPE="$TH_BUILD_TYPE")
elif [ ! -f "$build/CMakeCache.txt" ]; then
    type=(-DCMAKE_BUILD_TYPE="${TH_NEW_BUILD_TYPE:-RelWithDebInfo}")
fi
cmake -S . -B "$build" "${type[@]}" "$@" >/dev/null
cmake --build "$build" -j "${TH_JOBS:-$(nproc)}"
