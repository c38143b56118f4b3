#!/usr/bin/env bash
# The C/C++ unit tests and the single-process integration tests (errors,
# security, observability: th_integration_checks) under AddressSanitizer +
# UBSan, built into ${TH_ASAN_BUILD_DIR:-build-asan} against the system's UCX
# (Debian: 1.13, active-message reads everywhere), so that the path older
# UCX takes stays tested too. Part of the test command (scripts/test.sh).
#
#   scripts/asan.sh          build and run
#   scripts/asan.sh build    build only
#   scripts/asan.sh run      run what was built
set -euo pipefail
cd "$(dirname "$0")/.."
build=${TH_ASAN_BUILD_DIR:-build-asan}
what=${1:-all}
case "$what" in all|build|run) ;; *) echo "usage: scripts/asan.sh [build|run]" >&2; exit 2 ;; esac

if [ "$what" != run ]; then
    # Line tables only (-g1): reports keep file and line, and the build is
    # faster than with full debug information.
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DCMAKE_C_FLAGS_DEBUG=-g1 \
        -DTH_SANITIZE=address -DTH_WITH_CUDA=OFF -DTH_UCX=system >/dev/null
    cmake --build "$build" -j "${TH_JOBS:-$(nproc)}" --target th_unit_tests th_sim_tests th_integration_checks \
        th_header_test th_fuzz_replay_server th_fuzz_replay_client th_fuzz_replay_etcd th_test_worker tensorhub
fi
if [ "$what" != build ]; then
    export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    # NNG's own leaks that a test provokes on purpose (tests/lsan.supp says which).
    export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp"
    (cd "$build" && ctest --output-on-failure --timeout 300 -j "${TH_TEST_JOBS:-2}" -L unit -E "^(exports|readme_snippets)$")
    timeout 300 "$build/tests/integration/th_integration_checks" --gtest_brief=1
fi
