#!/usr/bin/env bash
# Packs what perf/gpu/run.sh needs into one folder, for a GPU machine that
# has the NVIDIA driver, Python, PyTorch and transformers but cannot install
# this project's build dependencies (NNG, mbedTLS, the UCX wheel): the
# library, the unit tests, the fetch benchmark and the server, built here
# with CUDA, and every shared library they load that such a machine lacks.
#
#   perf/gpu/pack.sh [--no-build] [BUNDLE]   default .gpu-bundle (git-ignored), ~30 MiB
#
# Builds in ${TH_GPU_BUILD_DIR:-build} (Release, CUDA on; configured if it is
# not; --no-build: packs what is there). Checks that the bundle loads nothing
# from outside itself but the C and C++ runtimes and the NVIDIA driver.
# Then, on the GPU machine, from a checkout of the same commit:
#   perf/gpu/run.sh BUNDLE OUT
set -euo pipefail
build=$(realpath -m "${TH_GPU_BUILD_DIR:-$(dirname "$0")/../../build}")
no_build=0
if [ "${1:-}" = --no-build ]; then no_build=1; shift; fi
bundle=$(realpath -m "${1:-$(dirname "$0")/../../.gpu-bundle}")
cd "$(dirname "$0")/../.."

if [ $no_build = 0 ] && ! grep -q '^TH_WITH_CUDA:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTH_WITH_CUDA=ON >/dev/null
fi
grep -q '^TH_WITH_CUDA:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null ||
    { echo "pack.sh: $build is not a build with CUDA (is the CUDA toolkit installed?)" >&2; exit 77; }
[ $no_build = 1 ] ||
    cmake --build "$build" -j "$(nproc)" --target tensorhub th_unit_tests tensorhub-fetch-bench tensorhub-server >/dev/null

rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib"
cp "$build/tests/unit/th_unit_tests" "$build/perf/tensorhub-fetch-bench" "$build/tensorhub-server" "$bundle/bin/"
cp -P "$build"/libtensorhub.so* "$bundle/lib/"

# UCX: the libraries the build linked, with their transport modules (found
# in ucx/ beside libucs) and the wheel's own copies of what those need,
# in the wheel's layout: the modules find them by a relative path.
ucs=$(ldd "$build/libtensorhub.so" | awk '$1 == "libucs.so.0" {print $3}')
[ -n "$ucs" ] || { echo "pack.sh: libtensorhub.so does not load libucs" >&2; exit 1; }
ucxlib=$(dirname "$(readlink -f "$ucs")")
ucxroot=$(dirname "$(dirname "$ucxlib")")  # site-packages for the wheel
mkdir -p "$bundle/ucx/lib/ucx"
for l in libucp libucs libuct libucm libucs_signal; do
    [ -e "$ucxlib/$l.so.0" ] && cp -L "$ucxlib/$l.so.0" "$bundle/ucx/lib/"
done
for m in libucm_cuda libuct_cma libuct_cuda; do
    [ -e "$ucxlib/ucx/$m.so.0" ] && cp -L "$ucxlib/ucx/$m.so.0" "$bundle/ucx/lib/ucx/"
done
for libs in "$ucxroot"/libucx_cu*.libs; do
    [ -d "$libs" ] || continue
    mkdir -p "$bundle/$(basename "$libs")"
    cp -L "$libs"/* "$bundle/$(basename "$libs")/"  # ucx/lib/ucx/../../../ as in site-packages
done

# Everything else they load, but the C library, the compiler's runtime and
# the driver, which the GPU machine has (newer).
keep() {
    case "$(basename "$1")" in
        libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libgcc_s.so*|libstdc++.so*) return 1 ;;
        libcuda.so*|libnvidia-ml.so*|libuc[mpst]*.so*) return 1 ;;
    esac
}
# What the bundle's programs and libraries load from outside it, and keep()
# would pack, with LD_LIBRARY_PATH=$1.
from_outside() {
    for elf in "$bundle"/bin/* "$bundle"/lib/libtensorhub.so "$bundle"/ucx/lib/*.so.0 "$bundle"/ucx/lib/ucx/*.so.0; do
        env -u LD_PRELOAD LD_LIBRARY_PATH="$1" ldd "$elf" |
            awk -v b="$bundle/" '$2 == "=>" && $3 ~ /^\// && index($3, b) != 1 {print $3}'
    done | sort -u | while read -r dep; do keep "$dep" && echo "$dep"; done || true
}
from_outside "$bundle/ucx/lib" | while read -r dep; do cp -nL "$dep" "$bundle/lib/"; done
strip --strip-unneeded "$bundle"/bin/* "$bundle"/lib/*.so* 2>/dev/null || true

# What the GPU machine must not be asked for.
outside=$(from_outside "$bundle/lib:$bundle/ucx/lib")
if [ -n "$outside" ]; then
    echo "pack.sh: the bundle would load these from this machine:" $outside >&2
    exit 1
fi
git rev-parse HEAD > "$bundle/COMMIT" 2>/dev/null || true
echo "pack.sh: $bundle ($(du -sh "$bundle" | cut -f1)), from $(cat "$bundle/COMMIT" 2>/dev/null || echo 'a tree outside git')"
