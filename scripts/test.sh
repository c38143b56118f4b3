#!/usr/bin/env bash
# Installs what is missing, builds everything and runs every test: C/C++
# (ctest), the Python, Rust and Go bindings, then the C/C++ unit tests again
# under ASan+UBSan. Exits non-zero if anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

echo "== build"
scripts/build.sh
echo "== C/C++ tests"
(cd "${TH_BUILD_DIR:-build}" && ctest --output-on-failure --timeout 300)

echo "== Python binding"
bindings/python/run_tests.sh
echo "== Rust binding"
bindings/rust/run_tests.sh
echo "== Go binding"
bindings/go/run_tests.sh

if [ "${TH_SKIP_SANITIZERS:-0}" != 1 ]; then
    echo "== C/C++ unit and single-process tests under AddressSanitizer + UBSan"
    TH_BUILD_DIR=build-asan TH_BUILD_TYPE=Debug scripts/build.sh -DTH_SANITIZE=address -DTH_WITH_CUDA=OFF
    (cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
        ctest --output-on-failure --timeout 300 -L unit)
fi
