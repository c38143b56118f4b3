#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs a local cluster
# demo with the embedded server (1 trainer, 4 rollout processes, 3 versions of
# a 2 x 128 MiB model). Extra arguments go to tensorhub-demo (--help lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
TH_SETUP_GO=0 TH_SETUP_TORCH=0 scripts/setup.sh
scripts/build.sh
exec "${TH_BUILD_DIR:-build}/tensorhub-demo" "$@"
