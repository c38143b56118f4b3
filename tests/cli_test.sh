#!/bin/sh
# tensorhub-server as a binary, a publisher, and the tensorhub CLI reading the
# server's status in both formats; exit codes for scripts.
set -eu
server_bin=$1 cli=$2 worker=$3
dir=$(mktemp -d)
pids=""
cleanup() { for p in $pids; do kill "$p" 2>/dev/null || true; done; rm -rf "$dir"; }
trap cleanup EXIT

"$server_bin" --listen tcp://127.0.0.1:0 > "$dir/server.out" 2>&1 &
pids="$pids $!"
for _ in $(seq 100); do grep -q listening "$dir/server.out" && break; sleep 0.05; done
url=$(sed -n 's/^listening on //p' "$dir/server.out")
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

# Scripts can tell failures apart: 1 = server unreachable, 2 = usage.
set +e
"$cli" status --server tcp://127.0.0.1:1 --timeout-ms 300 2> "$dir/err.out"; rc=$?
[ $rc -eq 1 ] && grep -q "cannot reach" "$dir/err.out" || { echo "unreachable: rc=$rc"; cat "$dir/err.out"; exit 1; }
"$cli" frobnicate --server "$url" 2>/dev/null; [ $? -eq 2 ] || { echo "usage error expected"; exit 1; }
echo "1 passed, 0 failed"
