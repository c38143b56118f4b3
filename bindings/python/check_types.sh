#!/usr/bin/env bash
# Checks the Python binding's annotations with mypy, under pyproject.toml's
# strict settings: the package ships py.typed, so its annotations are part of
# its interface. Needs mypy and torch (install_test_deps.sh installs both);
# without them it exits 77 (skipped), except with CI=true, where that fails.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
python="${PYTHON:-python3}"
if ! "$python" -c "import mypy, torch" 2>/dev/null; then
    if [[ "${CI:-}" =~ ^(true|1|TRUE|True)$ ]]; then
        echo "check_types.sh: mypy or torch is not installed, and CI must check types (scripts/setup.sh installs them)" >&2
        exit 1
    fi
    echo "check_types.sh: skipped: mypy or torch is not installed (bindings/python/install_test_deps.sh installs them)"
    exit 77
fi
cd "$here"
# The cache outside the source tree (a clean clone stays clean); a warm one
# makes the next run take ~2 s instead of ~20 s.
exec "$python" -m mypy --cache-dir "${TH_MYPY_CACHE_DIR:-${TMPDIR:-/tmp}/tensorhub-mypy-cache}" tensorhub
