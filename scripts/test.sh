#!/usr/bin/env bash
# Installs what is missing, builds everything and runs every test: C/C++
# (ctest), the Python, Rust and Go bindings, then the C/C++ unit tests again
# under ASan+UBSan. TH_TSAN=1 adds every C/C++ unit and integration test
# under ThreadSanitizer (about 12 more minutes). Exits non-zero if anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

echo "== build"
# A new build directory is made Release: the tests need no debug information,
# which makes compiling about a third slower (RelWithDebInfo, build.sh's
# default), and a unity build (build.sh), which halves the compile time. An
# existing one keeps its type. The sanitizer build below is not a unity
# build, so every file it compiles is still checked to compile on its own.
# Under CI a compiler warning fails the build (TH_WERROR).
werror=()
if [ "${CI:-}" = true ]; then werror=(-DTH_WERROR=ON); fi
TH_NEW_BUILD_TYPE=${TH_NEW_BUILD_TYPE:-Release} TH_NEW_BUILD_UNITY=${TH_NEW_BUILD_UNITY:-ON} scripts/build.sh "${werror[@]}"
echo "== C/C++ tests"
# No retries: a test that fails once fails the run (a retry would hide flakes).
# First the tests that must run alone (label "alone": they rewire network
# namespaces and shape links), then the rest two at a time (most wait on
# timeouts and other processes), the fault runs one after another beside them
# (RESOURCE_LOCK). TH_TEST_JOBS=1 runs them one by one.
ctest_args=(--output-on-failure --timeout 300)

# The sanitizer build (scripts/asan.sh) compiles while the tests run: they
# keep about a third of two cores busy (those that run alone less: they
# mostly wait on shaped links and leases), and the compiler runs under
# SCHED_IDLE, so it only gets the CPU time they leave. Its tests run last.
# TH_SKIP_SANITIZERS=1 skips it.
asan_build=
asan_log=${TH_ASAN_BUILD_DIR:-build-asan}.log
if [ "${TH_SKIP_SANITIZERS:-0}" != 1 ]; then
    setsid -w chrt --idle 0 scripts/asan.sh build >"$asan_log" 2>&1 &
    asan_build=$!
    trap '[ -z "$asan_build" ] || kill -- -"$asan_build" 2>/dev/null || true' EXIT
fi
# UCX >= 1.21 patches eight libc functions when a process loads it and after
# each waits UCX_MEM_BISTRO_GRACE_DURATION (50 ms) in a sched_yield loop for
# threads that might be running the bytes it replaced: 0.4 s of a busy core
# at every start of a process, half of the C/C++ tests' time on two cores. A
# test process loads UCX as it starts, before it has threads, so the tests
# run without the grace unless it is set (README, "Building by hand"). Only
# where the build's UCX has the option: older ones warn about variables they
# do not know (the sanitizer build's UCX is the system's).
quick_ucx=()
ucs=$(ldd "${TH_BUILD_DIR:-build}/libtensorhub.so" | awk '/libucs\.so/ {print $3}')
if [ -n "$ucs" ] && grep -q BISTRO_GRACE_DURATION "$ucs"; then
    quick_ucx=(env "UCX_MEM_BISTRO_GRACE_DURATION=${UCX_MEM_BISTRO_GRACE_DURATION:-0}")
fi
(cd "${TH_BUILD_DIR:-build}" && "${quick_ucx[@]}" ctest "${ctest_args[@]}" -L alone)
(cd "${TH_BUILD_DIR:-build}" && "${quick_ucx[@]}" ctest "${ctest_args[@]}" -LE alone -j "${TH_TEST_JOBS:-2}")

echo "== Python binding"
"${quick_ucx[@]}" bindings/python/run_tests.sh
echo "== Rust binding"
"${quick_ucx[@]}" bindings/rust/run_tests.sh
echo "== Go binding"
"${quick_ucx[@]}" bindings/go/run_tests.sh

if [ -n "$asan_build" ]; then
    echo "== C/C++ unit and single-process tests under AddressSanitizer + UBSan"
    if ! wait "$asan_build"; then
        asan_build=
        echo "test.sh: the sanitizer build failed:" >&2
        tail -n 60 "$asan_log" >&2
        exit 1
    fi
    asan_build=
    scripts/asan.sh run
fi

if [ "${TH_TSAN:-0}" = 1 ]; then
    echo "== C/C++ unit and integration tests under ThreadSanitizer"
    scripts/tsan.sh
fi
