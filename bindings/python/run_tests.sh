#!/usr/bin/env bash
# Runs the Python binding's tests against the library in ../../build (or
# $TENSORHUB_LIB). Installs what is missing first (install_test_deps.sh:
# numpy, pytest, and the pinned torch and transformers unless TH_SETUP_TORCH=0).
# Extra arguments go to pytest (e.g. -k roundtrip, -x). With CI=true, a
# missing torch or transformers fails the run instead of skipping its tests.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
python="${PYTHON:-python3}"

PYTHON="$python" "$here/install_test_deps.sh"
if [ -z "${TENSORHUB_LIB:-}" ]; then
    export TENSORHUB_LIB="$here/../../build/libtensorhub.so"
fi
if [ ! -e "$TENSORHUB_LIB" ]; then
    echo "run_tests.sh: $TENSORHUB_LIB not found; build the C library first (scripts/build.sh)" >&2
    exit 1
fi

cd "$here"
# pytest exits 5 when it collected nothing: that is a failure here too.
exec "$python" -m pytest -q tests "$@"
