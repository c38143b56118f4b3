#!/usr/bin/env bash
# go vet + go test for the Go bindings against the CMake build of libtensorhub.
# No module downloads: the package has no dependencies (GOPROXY=off).
set -euo pipefail
cd "$(dirname "$0")"
export GOPROXY=off GOFLAGS="${GOFLAGS:--count=1}" CGO_ENABLED=1
# Go needs a writable module and build cache; HOME may not be writable.
if [ ! -w "${HOME:-/nonexistent}" ]; then
    export GOPATH="${GOPATH:-/tmp/tensorhub-go/path}" GOCACHE="${GOCACHE:-/tmp/tensorhub-go/cache}"
fi
# cgo finds the library through pkg-config: the build tree's
# tensorhub-uninstalled.pc unless PKG_CONFIG_PATH already names another.
build="$(cd ../.. && pwd)/${TH_BUILD_DIR:-build}"
test -e "$build/libtensorhub.so" || { echo "build libtensorhub first (scripts/build.sh)" >&2; exit 1; }
export PKG_CONFIG_PATH="${PKG_CONFIG_PATH:-$build}"
go vet ./...
go test "$@" ./...
