#!/usr/bin/env bash
# Configures and builds tensorhub into ${TH_BUILD_DIR:-build}.
# Extra arguments go to cmake (e.g. -DTH_SANITIZE=address).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${TH_BUILD_DIR:-build}
# TH_BUILD_TYPE sets the build type; without it a new build directory gets
# TH_NEW_BUILD_TYPE (default RelWithDebInfo) and an existing one keeps its type.
# TH_NEW_BUILD_UNITY=ON makes a new one a unity build (CMAKE_UNITY_BUILD: each
# target's files compiled a few at a time as one, about 45% less compile
# time, but every change recompiles its whole batch).
type=()
if [ -n "${TH_BUILD_TYPE:-}" ]; then
    type=(-DCMAKE_BUILD_TYPE="$TH_BUILD_TYPE")
elif [ ! -f "$build/CMakeCache.txt" ]; then
    type=(-DCMAKE_BUILD_TYPE="${TH_NEW_BUILD_TYPE:-RelWithDebInfo}" -DCMAKE_UNITY_BUILD="${TH_NEW_BUILD_UNITY:-OFF}")
fi
cmake -S . -B "$build" "${type[@]}" "$@" >/dev/null
cmake --build "$build" -j "${TH_JOBS:-$(nproc)}"
