#!/bin/sh
# tensorhub-server as a binary, a publisher, and the tensorhub CLI reading the
# server's status in both formats; exit codes for scripts.
set -eu
server_bin=$1 cli=$2 worker=$3
dir=$(mktemp -d)
pids=""
cleanup() { for p in $pids; do kill "$p" 2>/dev/null || true; done; rm -rf "$dir"; }
trap cleanup EXIT

"$server_bin" --listen tcp://127.0.0.1:0 --metrics-listen http://127.0.0.1:0 > "$dir/server.out" 2>&1 &
pids="$pids $!"
for _ in $(seq 100); do grep -q "live page" "$dir/server.out" && break; sleep 0.05; done
url=$(sed -n 's/^listening on //p' "$dir/server.out")
page=$(sed -n 's/^live page on //p' "$dir/server.out")
[ -n "$url" ] || { echo "server did not start"; exit 1; }

"$worker" publish --server "$url" --name cli-publisher --model policy --version 9 --shard-kb 512 > "$dir/pub.out" 2>&1 &
pids="$pids $!"
for _ in $(seq 200); do grep -q ready "$dir/pub.out" && break; sleep 0.05; done
grep -q ready "$dir/pub.out" || { cat "$dir/pub.out"; exit 1; }

"$cli" status --server "$url" > "$dir/human.out"
grep -q "policy (latest committed: 9)" "$dir/human.out" || { cat "$dir/human.out"; exit 1; }
grep -q "cli-publisher\[published\]" "$dir/human.out" || { cat "$dir/human.out"; exit 1; }
TENSORHUB_SERVER="$url" "$cli" status --json > "$dir/json.out"
python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); assert s["models"][0]["latest"]==9, s' "$dir/json.out"

# The live page's endpoint gives the CLI the same document.
"$cli" status --server "$page" > "$dir/human-http.out"
grep -q "cli-publisher\[published\]" "$dir/human-http.out" || { cat "$dir/human-http.out"; exit 1; }
"$cli" status --server "$page" --json > "$dir/json-http.out"
python3 - "$dir/json.out" "$dir/json-http.out" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
for doc in (a, b):
    doc.pop("uptime_ms")
    for w in doc["workers"]:
        w.pop("last_seen_ms_ago")
assert a == b, (a, b)
PY

"$cli" workers --server "$url" | grep -q "cli-publisher" || exit 1
"$cli" versions policy --server "$url" | grep -q "^9	committed, required	1 replicas	latest" || { "$cli" versions policy --server "$url"; exit 1; }
"$cli" versions policy --server "$url" --format json |
    python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["latest"]==9 and d["versions"][0]["required"], d'
"$cli" holders policy 9 --server "$url" | grep -q "shard 0 .*cli-publisher\[published\]" || exit 1
"$cli" holders policy 9 --server "$url" --format json |
    python3 -c 'import json,sys; d=json.load(sys.stdin); assert d[0]["worker"]=="cli-publisher" and d[0]["state"]=="published", d'

# watch reports what exists, then changes as they happen.
"$cli" watch --server "$url" --interval-ms 50 --count 4 --format json > "$dir/watch.out" &
watch_pid=$!
pids="$pids $watch_pid"
sleep 0.3
"$worker" publish --server "$url" --name second --model policy --version 10 --shard-kb 512 > "$dir/pub2.out" 2>&1 &
pids="$pids $!"
for _ in $(seq 200); do kill -0 $watch_pid 2>/dev/null || break; sleep 0.05; done
python3 - "$dir/watch.out" <<'PY'
import json, sys
events = [json.loads(l) for l in open(sys.argv[1])]
kinds = {(e["event"], e.get("model"), e.get("version"), e.get("name")) for e in events}
assert ("committed", "policy", 9, None) in kinds, events
assert ("committed", "policy", 10, None) in kinds, events
assert ("worker_joined", None, None, "second") in kinds, events
PY

# Scripts can tell failures apart: 1 = server unreachable, 2 = usage, 3 = not found.
set +e
"$cli" holders policy 7 --server "$url" 2>/dev/null; [ $? -eq 3 ] || { echo "not found expected"; exit 1; }
"$cli" versions nope --server "$url" 2>/dev/null; [ $? -eq 3 ] || { echo "not found expected"; exit 1; }
"$cli" status --server tcp://127.0.0.1:1 --timeout-ms 300 2> "$dir/err.out"; rc=$?
[ $rc -eq 1 ] && grep -q "cannot reach" "$dir/err.out" || { echo "unreachable: rc=$rc"; cat "$dir/err.out"; exit 1; }
"$cli" frobnicate --server "$url" 2>/dev/null; [ $? -eq 2 ] || { echo "usage error expected"; exit 1; }
echo "1 passed, 0 failed"
