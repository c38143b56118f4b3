#!/usr/bin/env bash
# Runs the Python binding's tests against the library in ../../build (or
# $TENSORHUB_LIB). Installs numpy and pytest with pip if they are missing.
# Extra arguments go to pytest (e.g. -k roundtrip, -x).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
python="${PYTHON:-python3}"

if ! "$python" -c "import numpy, pytest" 2>/dev/null; then
    "$python" -m pip install -q numpy pytest
fi
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
