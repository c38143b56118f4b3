#!/bin/sh
# Installs the build into a temporary prefix, builds the C examples against
# the installed copy twice (pkg-config, and CMake's find_package), and runs a
# publisher and a reader with the installed tensorhub-server.
set -eu
build=$1 src=$2
dir=$(mktemp -d)
pids=""
cleanup() { for p in $pids; do kill "$p" 2>/dev/null || true; done; rm -rf "$dir"; }
trap cleanup EXIT

cmake --install "$build" --prefix "$dir/prefix" > /dev/null
libdir=$(ls -d "$dir"/prefix/lib*/pkgconfig | head -n 1 | xargs dirname)
export PKG_CONFIG_PATH="$libdir/pkgconfig" LD_LIBRARY_PATH="$libdir"

# pkg-config
for p in publisher reader; do
    cc -std=c99 -Wall -Wextra -pedantic -Werror "$src/examples/c/$p.c" -o "$dir/$p-pc" $(pkg-config --cflags --libs tensorhub)
done
# CMake package
cmake -S "$src/examples/c" -B "$dir/cmake-build" -DCMAKE_PREFIX_PATH="$dir/prefix" > /dev/null
cmake --build "$dir/cmake-build" > /dev/null

"$dir/prefix/bin/tensorhub-server" --listen tcp://127.0.0.1:0 > "$dir/server.out" 2>&1 &
pids="$pids $!"
for _ in $(seq 100); do grep -q listening "$dir/server.out" && break; sleep 0.05; done
url=$(sed -n 's/^listening on //p' "$dir/server.out")

mkfifo "$dir/hold"
"$dir/publisher-pc" "$url" < "$dir/hold" > "$dir/pub.out" 2>&1 &
pids="$pids $!"
exec 3> "$dir/hold"   # keeps the publisher's stdin open
for _ in $(seq 200); do grep -q published "$dir/pub.out" && break; sleep 0.05; done
grep -q published "$dir/pub.out" || { cat "$dir/pub.out"; exit 1; }
"$dir/reader-pc" "$url" | grep -q "fetched example v1: weights\[1000\] = 500.0, bias\[3\] = -3.0"
"$dir/cmake-build/reader" "$url" | grep -q "fetched example v1"
"$dir/prefix/bin/tensorhub" holders example 1 --server "$url" | grep -q "example-publisher\[published\]"
exec 3>&-

# The Go binding links the installed library through its tensorhub.pc alone
# (no LD_LIBRARY_PATH: the rpath comes from the .pc file).
if command -v go > /dev/null; then
    cp -r "$src/bindings/go" "$dir/go"
    (cd "$dir/go" && env -u LD_LIBRARY_PATH GOPROXY=off GOFLAGS=-count=1 GOCACHE="$dir/gocache" CGO_ENABLED=1 \
        go test -run 'TestDefaultsAreTheLibrarysDefaults' . > "$dir/go.out" 2>&1) || { cat "$dir/go.out"; exit 1; }
fi
echo "1 passed, 0 failed"
