#!/usr/bin/env bash
# Every C/C++ unit and integration test under ThreadSanitizer, and each kind
# of the fault suite once over shared memory and once over tcp (about 12
# minutes on 2 cores: the nightly run; `TH_TSAN=1 scripts/test.sh` adds it to
# the test command). Builds into ${TH_TSAN_BUILD_DIR:-build-tsan}.
#
#   scripts/tsan.sh           build and run
#   scripts/tsan.sh --check   configure only, and check the suppressions file:
#                             what ctest runs (tsan_setup) so that this
#                             command keeps working between nightly runs
set -euo pipefail
cd "$(dirname "$0")/.."
build=${TH_TSAN_BUILD_DIR:-build-tsan}
supp=$PWD/tests/tsan.supp

# Every line of the suppressions file is a comment, blank, or KIND:PATTERN
# with a kind TSan knows; a typo would silently suppress nothing.
bad=$(grep -vnE '^[[:space:]]*(#.*)?$|^(race|race_top|thread|mutex|signal|deadlock|called_from_lib):[^[:space:]]+$' "$supp" || true)
if [ -n "$bad" ]; then
    echo "tsan.sh: malformed lines in $supp:" >&2
    echo "$bad" >&2
    exit 1
fi

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DTH_SANITIZE=thread -DTH_WITH_CUDA=OFF >/dev/null
if [ "${1:-}" = --check ]; then
    grep -q 'fsanitize=thread' "$build/CMakeCache.txt" 2>/dev/null || grep -rq --include=flags.make 'fsanitize=thread' "$build" ||
        { echo "tsan.sh: $build is not configured with ThreadSanitizer" >&2; exit 1; }
    echo "1 passed, 0 failed"
    exit 0
fi
cmake --build "$build" -j "${TH_JOBS:-$(nproc)}" --target th_unit_tests th_integration_tests th_test_worker \
    th_fault_driver tensorhub-server tensorhub
# UCX's memory hooks (libucm) patch mmap/madvise, which TSan intercepts too:
# they crash together, so the hooks are off. tests/tsan.supp says which
# reports are the data plane's design.
cd "$build"
export UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_MALLOC_HOOKS=no UCX_MEM_EVENTS=no \
    TSAN_OPTIONS="halt_on_error=1 history_size=7 suppressions=$supp"
./tests/unit/th_unit_tests
./tests/integration/th_integration_tests
# The fault suite's kinds, once each, on shared memory (one-sided reads) and
# on tcp (active-message reads), server and workers built with TSan. Not
# chaos: over its minute of faults TSan forgets the earlier access of a
# designed race (a holder's answer against its owner's rewrite) and can no
# longer match it to the suppressions.
for tls in sm,tcp tcp; do
    echo "tsan.sh: fault kinds over UCX_TLS=$tls"
    UCX_TLS=$tls ./tests/fault/th_fault_driver --server-bin ./tensorhub-server \
        --worker-bin ./tests/integration/th_test_worker --runs 1 --seed "${TH_FAULT_SEED:-20240620}"
done
