#!/usr/bin/env bash
# Installs, with pip and only when missing, what the Python binding's tests
# need: numpy and pytest, mypy (pinned: the type check, check_types.sh), and
# unless TH_SETUP_TORCH=0, the pinned torch and transformers of
# requirements-torch.txt. Called by run_tests.sh and by
# scripts/setup.sh. PYTHON selects the interpreter (default python3).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
python="${PYTHON:-python3}"
# Debian's own python3 refuses pip installs outside a virtual environment
# (PEP 668); this is a build machine's interpreter, so install anyway.
export PIP_BREAK_SYSTEM_PACKAGES=1 PIP_DISABLE_PIP_VERSION_CHECK=1

if ! "$python" -c "import numpy, pytest" 2>/dev/null; then
    echo "install_test_deps: installing numpy and pytest"
    "$python" -m pip install -q numpy pytest
fi
mypy_version=2.4.1
if ! "$python" -c "import importlib.metadata as m, sys; sys.exit(m.version('mypy') != '$mypy_version')" 2>/dev/null; then
    echo "install_test_deps: installing mypy==$mypy_version"
    "$python" -m pip install -q "mypy==$mypy_version"
fi
if [ "${TH_SETUP_TORCH:-1}" = 1 ] && ! "$python" -c "import torch, transformers" 2>/dev/null; then
    echo "install_test_deps: installing $(grep -v '^#' "$here/requirements-torch.txt" | xargs) (several GB, minutes)"
    start=$(date +%s)
    "$python" -m pip install -q --retries 5 --timeout 60 -r "$here/requirements-torch.txt"
    echo "install_test_deps: torch stack installed in $(( $(date +%s) - start )) s"
fi
