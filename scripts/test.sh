#!/usr/bin/env bash
# Installs what is missing, builds everything and runs every test: C/C++
# (ctest), the Python, Rust and Go bindings, then the C/C++ unit tests again
# under ASan+UBSan. TH_TSAN=1 adds every C/C++ unit and integration test
# under ThreadSanitizer (about 10 more minutes). Exits non-zero if anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

echo "== build"
# A new build directory is made Release: the tests need no debug information,
# which makes compiling about a third slower (RelWithDebInfo, build.sh's
# default). An existing one keeps its type.
TH_NEW_BUILD_TYPE=${TH_NEW_BUILD_TYPE:-Release} scripts/build.sh
echo "== C/C++ tests"
# No retries: a test that fails once fails the run (a retry would hide flakes).
# Two tests at a time (most wait on timeouts and other processes); the fault
# runs one after another beside the rest (RESOURCE_LOCK), the tests that use
# network namespaces alone (RUN_SERIAL in their CMake files).
# TH_TEST_JOBS=1 runs them one by one.
(cd "${TH_BUILD_DIR:-build}" && ctest --output-on-failure --timeout 300 -j "${TH_TEST_JOBS:-2}")

echo "== Python binding"
bindings/python/run_tests.sh
echo "== Rust binding"
bindings/rust/run_tests.sh
echo "== Go binding"
bindings/go/run_tests.sh

if [ "${TH_SKIP_SANITIZERS:-0}" != 1 ]; then
    echo "== C/C++ unit and single-process tests under AddressSanitizer + UBSan"
    # Against the system UCX (Debian: 1.13, active-message reads everywhere),
    # so that the path older UCX takes stays tested too.
    # Line tables only (-g1): reports keep file and line, and the build is
    # faster than with full debug information.
    cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DCMAKE_C_FLAGS_DEBUG=-g1 \
        -DTH_SANITIZE=address -DTH_WITH_CUDA=OFF -DTH_UCX=system >/dev/null
    cmake --build build-asan -j "${TH_JOBS:-$(nproc)}" --target th_unit_tests th_sim_tests th_integration_tests th_header_test \
        th_fuzz_replay_server th_fuzz_replay_client th_fuzz_replay_etcd th_test_worker tensorhub
    (cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        ctest --output-on-failure --timeout 300 -L unit -E "^(exports|readme_snippets)$" &&
        ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        ctest --output-on-failure --timeout 300 -R "^(Errors|ServerErrors|Security|Observability)[.]")
fi

if [ "${TH_TSAN:-0}" = 1 ]; then
    echo "== C/C++ unit and integration tests under ThreadSanitizer"
    scripts/tsan.sh
fi
