#!/bin/sh
# The server's live page in headless Chromium: a server with a publisher and
# readers (one still fetching, slowly), the page loaded with its scripts run,
# and every reader drawn in the replication tree under the source the server
# says it read from. Saves a screenshot (argument 3, default in a temp dir).
# Exits 77 (skipped) when Chromium is not installed: apt-get install chromium.
set -eu
server_bin=$1 worker=$2 screenshot=${3:-}
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
    echo "SKIP: chromium is not installed (apt-get install chromium)"
    exit 77
fi
dir=$(mktemp -d)
pids=""
cleanup() { for p in $pids; do kill "$p" 2>/dev/null || true; done; rm -rf "$dir"; }
trap cleanup EXIT
[ -n "$screenshot" ] || screenshot="$dir/live-page.png"

wait_for() {  # file pattern: up to 10 s
    for _ in $(seq 200); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
    echo "timed out waiting for '$2' in $1:"; cat "$1"; exit 1
}

"$server_bin" --listen tcp://127.0.0.1:0 --metrics-listen http://127.0.0.1:0 > "$dir/server.out" 2>&1 &
pids="$pids $!"
wait_for "$dir/server.out" "live page on"
url=$(sed -n 's/^listening on //p' "$dir/server.out")
page=$(sed -n 's/^live page on //p' "$dir/server.out")

"$worker" publish --server "$url" --name trainer --model policy --version 3 --shard-kb 4096 \
    --chunk-kb 64 > "$dir/trainer.out" 2>&1 &
pids="$pids $!"
wait_for "$dir/trainer.out" ready
reader() {  # name [env]: a reader that fetches the newest version and serves it
    env ${2:-} "$worker" fetch --server "$url" --name "$1" --model policy --shard-kb 4096 > "$dir/$1.out" 2>&1 &
    pids="$pids $!"
}
# Two readers one after the other, then three at once; the server routes
# later readers to earlier ones' replicas.
reader rollout-1; wait_for "$dir/rollout-1.out" "^ok"
reader rollout-2; wait_for "$dir/rollout-2.out" "^ok"
for r in 3 4 5; do reader "rollout-$r"; done
for r in 3 4 5; do wait_for "$dir/rollout-$r.out" "^ok"; done
# One more that is still filling while the page is drawn: 64 chunks, 0.1 s
# each, so about half of them are in when the page is loaded.
reader rollout-6 TENSORHUB_FAULT_CHUNK_DELAY_US=100000
sleep 3.6

chrome() {
    timeout 60 "$browser" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --hide-scrollbars \
        --user-data-dir="$dir/profile" --virtual-time-budget=3000 --window-size=1280,1000 "$@" 2>> "$dir/chromium.err"
}
chrome --screenshot="$screenshot" "$page" > /dev/null || { cat "$dir/chromium.err"; exit 1; }
chrome --dump-dom "$page" > "$dir/dom.html" || { cat "$dir/chromium.err"; exit 1; }
[ -s "$screenshot" ] || { echo "no screenshot written"; cat "$dir/chromium.err"; exit 1; }

# The tree must show every reader with the source(s) /api/status names.
python3 - "$dir/dom.html" "${page}api/status" <<'PY'
import html.parser, json, sys, urllib.request

class Edges(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.edges, self.nodes = set(), {}
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "data-reader" in a:
            self.edges.add((a["data-reader"], a["data-source"]))
        if "data-node" in a:
            self.nodes[a["data-node"]] = a.get("data-fill", "")

dom = Edges()
dom.feed(open(sys.argv[1]).read())
status = json.load(urllib.request.urlopen(sys.argv[2], timeout=5))
names = {w["worker_id"]: w["name"] for w in status["workers"]}
version = status["models"][0]["versions"][-1]
want = {(names[r["reader"]], names[r["source"]]) for r in version["reads"]}
readers = {f"rollout-{i}" for i in range(1, 7)}
assert {r for r, _ in want} == readers, f"status lacks a reader: {sorted(want)}"
missing = want - dom.edges
assert not missing, f"the page does not show {sorted(missing)}; it shows {sorted(dom.edges)}"
assert readers | {"trainer"} <= set(dom.nodes), f"nodes drawn: {sorted(dom.nodes)}"
for r in sorted(dom.edges):
    print(f"  {r[0]} <- {r[1]}  (fill {dom.nodes.get(r[0]) or '?'})")
print(f"1 passed, 0 failed ({len(dom.edges)} edges drawn)")
PY
