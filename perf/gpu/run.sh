#!/usr/bin/env bash
# Runs the checks and benchmarks that need a GPU, from a bundle made by
# perf/gpu/pack.sh, and writes what they print into OUT:
#
#   perf/gpu/run.sh BUNDLE OUT [STEP ...]
#
# Steps (default: all, in this order; about 6 minutes on one H200 with 16
# vCPUs):
#   unit     the CUDA, checksum and lane unit tests          unit.log, unit.json
#   host     fetch benchmark, tcp and sm, 1 GiB, with 1, 2 and 4 copy threads
#                                                            fetch_host.jsonl
#   cuda     fetch benchmark, device memory over cuda_ipc, 8 and 16 GiB
#                                                            fetch_cuda.jsonl
#   python   the binding's torch tests, examples/python/torch_rl.py and the
#            engine adapters' tests, on the CPU and on the GPU  python.log
# Each step has its own time limit; a step that fails is reported and the
# next one runs. Exits non-zero if any step failed. machine.txt says what
# ran where; summary.txt has one line per step.
set -uo pipefail
self=$(realpath "$0")
mode=run
if [ "${1:-}" = __step ]; then mode=__step; shift; fi
if [ $# -lt 2 ]; then
    echo "usage: perf/gpu/run.sh BUNDLE OUT [unit|host|cuda|python ...]" >&2
    exit 2
fi
bundle=$(realpath "$1")
out=$(realpath -m "$2")
shift 2
steps=("$@")
cd "$(dirname "$self")/../.."
[ ${#steps[@]} -gt 0 ] || steps=(unit host cuda python)
mkdir -p "$out"
[ "$mode" = run ] || steps=("${steps[0]}")
[ -x "$bundle/bin/th_unit_tests" ] || { echo "run.sh: $bundle is not a bundle of perf/gpu/pack.sh" >&2; exit 2; }

export LD_LIBRARY_PATH="$bundle/lib:$bundle/ucx/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TENSORHUB_LIB="$bundle/lib/libtensorhub.so"
export PYTHONPATH="$PWD/bindings/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
bin=$bundle/bin

[ "$mode" = run ] && {
    echo "bundle from $(cat "$bundle/COMMIT" 2>/dev/null || echo '?'), checkout $(git rev-parse HEAD 2>/dev/null || echo '?')"
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
    echo "$(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
    free -g | sed -n 2p
    ldd "$bin/th_unit_tests" | grep -E "libuc[pst]|libtensorhub|libcudart|not found"
} > "$out/machine.txt" 2>&1

failed=0
# Runs step function $1 in a process of its own, so that its time limit
# ends everything it started.
step() {  # name, seconds
    local name=$1 limit=$2 t0 rc
    t0=$(date +%s)
    timeout -k 10 "$limit" bash "$self" __step "$bundle" "$out" "$name"
    rc=$?
    local line="$name: $([ $rc -eq 0 ] && echo ok || echo "FAILED (exit $rc$([ $rc -eq 124 ] && echo ", past ${limit} s"))") in $(($(date +%s) - t0)) s"
    echo "$line" | tee -a "$out/summary.txt"
    [ $rc -eq 0 ] || failed=1
}

unit() {
    "$bin/th_unit_tests" --gtest_filter='Cuda.*:Checksum.*:CudaIpcHolder.*:Transport/Lanes.*:Transport/CudaLanes.*:Transport/CudaAnsweredLane.*' \
        --gtest_output="json:$out/unit.json" > "$out/unit.log" 2>&1
    local rc=$?
    grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$out/unit.log"
    if [ $rc -eq 0 ] && nvidia-smi -L >/dev/null 2>&1 && grep -q "^\[  SKIPPED \] Cuda" "$out/unit.log"; then
        echo "the CUDA tests skipped on a machine with a GPU (unit.log says why)"
        return 1
    fi
    return $rc
}

# The JSON line each fetch benchmark prints last.
fetch() {  # file, arguments...
    local file=$1
    shift
    "$bin/tensorhub-fetch-bench" "$@" > "$out/fetch.log.tmp" 2>&1
    local rc=$?
    cat "$out/fetch.log.tmp" >> "$out/fetch.log"
    grep -E "^ +[0-9.]+ [MG]iB" "$out/fetch.log.tmp"
    tail -n 1 "$out/fetch.log.tmp" | grep '^{' | sed "s/^{/{\"args\":\"$*\",/" >> "$out/$file"
    rm -f "$out/fetch.log.tmp"
    return $rc
}

host() {
    local rc=0 t
    for t in 1 2 4; do
        fetch fetch_host.jsonl --lanes tcp,sm --sizes-mb 1024 --reps 5 --copy-threads "$t" || rc=1
    done
    return $rc
}

cuda() { fetch fetch_cuda.jsonl --lanes cuda --sizes-mb 8192,16384 --reps 3; }

python() {
    python3 -m pytest -q -rs bindings/python/tests/test_torch.py bindings/python/tests/test_torch_rl_example.py \
        bindings/python/tests/test_adapter_vllm.py bindings/python/tests/test_adapter_sglang.py \
        bindings/python/tests/test_adapter_verl.py > "$out/python.log" 2>&1
    local rc=$?
    tail -n 3 "$out/python.log"
    if [ $rc -eq 0 ] && nvidia-smi -L >/dev/null 2>&1 && grep -q "no CUDA device" "$out/python.log"; then
        echo "the GPU tests skipped on a machine with a GPU (is this python3's torch a CUDA build?)"
        return 1
    fi
    return $rc
}

if [ "$mode" = __step ]; then
    "${steps[0]}"
    exit $?
fi
rm -f "$out/summary.txt"
for s in "${steps[@]}"; do
    case "$s" in
        unit) step unit 150 ;;
        host) step host 200 ;;
        cuda) step cuda 150 ;;
        python) step python 180 ;;
        *) echo "run.sh: unknown step '$s' (unit, host, cuda, python)" >&2; failed=1 ;;
    esac
done
exit $failed
