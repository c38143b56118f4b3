#!/usr/bin/env bash
# A holder paused while its progress thread is inside a UCX progress call,
# with reads of it queued: gdb stops it in uct_tcp_iface_progress for 3 s
# while two slow readers read, then lets it go. The readers give up on it and
# close their endpoints meanwhile; on resume the holder answers their stale
# requests on those closed endpoints. It must live on (a one-sided GET that
# UCX emulated over tcp aborted the process here) and serve a new reader.
# Usage: pause_inside_progress.sh SERVER_BIN WORKER_BIN. Exit 77: no gdb.
set -u
server_bin=$1 worker_bin=$2
command -v gdb >/dev/null || { echo "skipped: gdb is not installed"; exit 77; }
dir=$(mktemp -d)
pids=()
# TERM first: `timeout` passes it on to the worker it runs (a SIGKILL of
# `timeout` itself would leave that worker running).
cleanup() { kill "${pids[@]}" 2>/dev/null; sleep 0.2; kill -9 "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
export UCX_TLS=tcp
# Port 0: the server picks a free one and says which.
"$server_bin" --listen tcp://127.0.0.1:0 --lease-ms 1500 >"$dir/server.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q '^listening on ' "$dir/server.log" && break; sleep 0.1; done
url=$(sed -n 's/^listening on //p' "$dir/server.log" | head -1)
[ -n "$url" ] || { echo "FAIL: the server did not start"; cat "$dir/server.log"; exit 1; }
common=(--server "$url" --model m --shard-kb 65536 --tensors 4 --chunk-timeout-ms 1000)
"$worker_bin" publish "${common[@]}" --shards 1 --name holder --version 1 --heartbeat-ms 200 >"$dir/holder.out" 2>"$dir/holder.err" &
holder=$!
pids+=($holder)
for _ in $(seq 300); do grep -q '^ready' "$dir/holder.out" && break; sleep 0.1; done
grep -q '^ready' "$dir/holder.out" || { echo "FAIL: the holder did not start"; tail -5 "$dir/holder.err" "$dir/server.log"; exit 1; }
for i in 0 1; do
    TENSORHUB_FAULT_CHUNK_DELAY_US=2000 timeout 60 "$worker_bin" fetch "${common[@]}" --shards 0 --name slow$i --no-serve --exit \
        >"$dir/slow$i.out" 2>&1 &
    pids+=($!)
done
sleep 0.4
timeout 30 gdb -p "$holder" -batch -ex 'break uct_tcp_iface_progress' -ex continue -ex delete \
    -ex 'shell sleep 3' -ex detach >"$dir/gdb.log" 2>&1
grep -q 'hit Breakpoint 1' "$dir/gdb.log" || { echo "FAIL: gdb did not stop the holder in a progress call"; cat "$dir/gdb.log"; exit 1; }
sleep 3
if ! kill -0 "$holder" 2>/dev/null; then
    echo "FAIL: the holder died after the pause"
    tail -5 "$dir/holder.err"
    exit 1
fi
# It re-registered after the pause: a new reader fetches from it. (A
# reader prints one line, then stays to serve until it is killed.)
"$worker_bin" fetch "${common[@]}" --shards 0 --name after --no-serve >"$dir/after.out" 2>"$dir/after.err" &
pids+=($!)
for _ in $(seq 600); do [ -s "$dir/after.out" ] && break; sleep 0.1; done
out=$(head -1 "$dir/after.out")
case "$out" in
ok*) echo "ok: the holder lived through the pause and served a new reader" ;;
*) echo "FAIL: a reader after the pause: ${out:-no answer in 60 s}"; tail -5 "$dir/after.err"; exit 1 ;;
esac
