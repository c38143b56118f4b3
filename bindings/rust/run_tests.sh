#!/usr/bin/env bash
# Builds and tests the Rust bindings against the CMake build of libtensorhub,
# after clippy (where it is installed) finds no warning, as `go vet` does for
# the Go binding.
# Env: TENSORHUB_LIB_DIR (default ../../build), TENSORHUB_INCLUDE_DIR.
set -euo pipefail
cd "$(dirname "$0")"
export TENSORHUB_LIB_DIR="${TENSORHUB_LIB_DIR:-$(cd ../../build && pwd)}"
export TENSORHUB_INCLUDE_DIR="${TENSORHUB_INCLUDE_DIR:-$(cd ../../include && pwd)}"
# Tests start servers and UCX workers in one process; the machine is small.
export RUST_TEST_THREADS="${RUST_TEST_THREADS:-2}"
if cargo clippy --version > /dev/null 2>&1; then
    cargo clippy --offline --all-targets --quiet -- -D warnings
else
    echo "run_tests.sh: cargo clippy is not installed; lints not checked"
fi
exec cargo test --offline "$@"
