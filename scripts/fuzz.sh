#!/usr/bin/env bash
# Fuzzes a message handler for a fixed time with libFuzzer (clang), under
# AddressSanitizer + UBSan:   scripts/fuzz.sh server|client [SECONDS=60]
# New inputs go to build-fuzz/corpus-TARGET; copy the interesting ones into
# tests/fuzz/corpus/TARGET so that every test run replays them.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?usage: scripts/fuzz.sh server|client [SECONDS]}
seconds=${2:-60}
scripts/setup.sh
for p in clang libclang-rt-14-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        { sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo; DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$p" >/dev/null; }
done
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DTH_FUZZ=ON -DTH_SANITIZE=address \
    -DTH_WITH_CUDA=OFF >/dev/null
cmake --build build-fuzz -j "${TH_JOBS:-$(nproc)}" --target "th_fuzz_$target"
mkdir -p "build-fuzz/corpus-$target"
cp -n tests/fuzz/corpus/"$target"/* "build-fuzz/corpus-$target/" 2>/dev/null || true
exec "build-fuzz/tests/fuzz/th_fuzz_$target" -max_total_time="$seconds" -max_len=65536 "build-fuzz/corpus-$target"
