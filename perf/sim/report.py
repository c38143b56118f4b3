#!/usr/bin/env python3
"""Regenerates perf/SIM.md (and its plots) from tensorhub-sim runs.

    perf/sim/report.py [--sim build/perf/tensorhub-sim] [--reuse] [--quick]

Runs `tensorhub-sim --report` (the experiment matrix) and `--validate`, keeps
their JSON under perf/results/, and writes perf/SIM.md. --reuse takes the JSON
already there instead of simulating again. Plots need matplotlib; without it
they are skipped with a message.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(ROOT, "perf", "results")
BASELINES = ["trainer_direct", "collective", "store"]
GOALS = {"standalone": 6.7, "elastic": 4.8, "cross_dc": 19.0}


def run(cmd, cwd=None):
    print("+", " ".join(cmd), file=sys.stderr)
    started = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    sys.stderr.write(p.stderr)
    return p, time.time() - started


def simulate_matrix(sim, quick, jobs, out_path):
    """Runs every part of the matrix (jobs at a time) and joins them in order."""
    q = ["--quick"] if quick else []
    parts = subprocess.run([sim, "--list-parts"] + q, capture_output=True, text=True, check=True).stdout.split()
    scratch = tempfile.mkdtemp(prefix="tensorhub-sim-")
    running, pending = {}, list(parts)
    while pending or running:
        while pending and len(running) < jobs:
            part = pending.pop(0)
            cmd = [sim, "--report", os.path.join(scratch, part + ".json"), "--parts", part] + q
            running[part] = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
        time.sleep(0.2)
        for part, proc in list(running.items()):
            if proc.poll() is None:
                continue
            sys.stderr.write(proc.stderr.read())
            if proc.returncode != 0:
                sys.exit(f"tensorhub-sim --report --parts {part} failed ({proc.returncode})")
            del running[part]
    groups = []
    for part in parts:
        with open(os.path.join(scratch, part + ".json")) as f:
            groups += json.load(f)
    shutil.rmtree(scratch)
    with open(out_path, "w") as f:
        json.dump(groups, f, indent=1)


def by_method(group):
    return {r["method"]: r for r in group["results"]}


def label(group):
    s = group["setup"]
    floor = s["size_bytes"] / s["host_bytes_per_s"]
    parts = [s["workload"], f"{s['gpus']:,} GPUs"]
    if s["workload"] == "elastic_join":
        parts.append(f"{s['holders']:,} hold, {s['readers']:,} join")
    if s["stagger_s"] > 0:
        parts.append(f"ready over {s['stagger_s'] / floor:.0f}x S/B")
    else:
        parts.append("all ready at once")
    if s["wan_bytes_per_s"] > 0:
        parts.append(f"WAN {s['wan_bytes_per_s'] / 1e9:.1f} GB/s")
    return ", ".join(parts)


def size(b):
    return f"{b / 2**30:.0f} GiB" if b >= 2**30 else f"{b / 2**20:.0f} MiB"


def ratio(a, b):
    return a / b if b > 0 else float("inf")


def messages(r):
    return sum(r["messages"].values())


def table(columns, rows):
    """A Markdown table; a column name ending in '>' is right-aligned."""
    head = "| " + " | ".join(c.rstrip(">") for c in columns) + " |"
    rule = "| " + " | ".join("---:" if c.endswith(">") else "---" for c in columns) + " |"
    return "\n".join([head, rule] + ["| " + " | ".join(str(x) for x in r) + " |" for r in rows])


def scale_table(groups):
    out = []
    for g in groups:
        m = by_method(g)
        th = m["tensorhub"]
        for name, r in m.items():
            served = f"{size(r['bytes_from_trainer'])} / {size(r['bytes_from_replicas'])} / {size(r['bytes_from_store'])}"
            out.append([label(g), name, f"{r['makespan_s'] / r['floor_s']:.2f} ({r['makespan_s']:.3g} s)",
                        f"{r['total_stall_s']:.4g}", f"{ratio(r['total_stall_s'], th['total_stall_s']):.2f}x", served,
                        f"{r['depth_max']} ({r['depth_mean']:.1f})",
                        f"{r['sim_wall_s']:.1f} s ({r['handle_seconds']:.1f} s)"])
    return table(["setup", "method", "makespan / floor>", "total stall (GPU-s)>", "stall vs tensorhub>",
                  "trainer / replica / store bytes", "tree depth max (mean)>", "sim run time (inside the server)>"], out)


def control_table(groups):
    out = []
    for g in groups:
        r = by_method(g)["tensorhub"]
        readers = g["setup"]["readers"]
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(r["messages"].items()))
        out.append([label(g), f"{messages(r):,} ({kinds})", f"{messages(r) / readers:.1f}", f"{r['plans']:,}",
                    f"{r['plan_seconds'] * 1e3:.1f} ms", f"{r['plan_max_seconds'] * 1e3:.2f} ms",
                    f"{r['handle_seconds'] * 1e3:.1f} ms"])
    return table(["setup", "control messages>", "per reader>", "plans>", "server time planning (sum)>", "slowest plan>",
                  "all requests inside handle()>"], out)


def goal_rows(groups):
    rows = []
    for g in groups:
        s, m = g["setup"], by_method(g)
        th = m["tensorhub"]
        if s["workload"] == "standalone" and s["stagger_s"] > 0:
            x = ratio(m["collective"]["total_stall_s"], th["total_stall_s"])
            rows.append(("standalone rollouts: stall vs the collective", label(g), x, GOALS["standalone"]))
        if s["workload"] == "elastic_join":
            x = ratio(m["trainer_direct"]["update_s"], th["update_s"])
            rows.append(("elastic join: update time vs trainer-direct", label(g), x, GOALS["elastic"]))
        if s["workload"] == "cross_dc":
            for b in BASELINES:
                x = ratio(m[b]["total_stall_s"], th["total_stall_s"])
                rows.append((f"cross-datacenter: stall vs {b}", label(g), x, GOALS["cross_dc"]))
    return rows


def goals_table(groups):
    out = [[what, where, f"{x:.1f}x", f">= {want}x", "met" if x >= want else "missed"]
           for what, where, x, want in goal_rows(groups)]
    plan = [g for g in groups if g["setup"]["readers"] >= 9000 and g["setup"]["workload"] == "standalone"]
    for g in plan:
        r = by_method(g)["tensorhub"]
        ok = r["plan_seconds"] < 1.0
        out.append([f"server time planning one update of {g['setup']['readers']:,} readers", label(g),
                    f"{r['plan_seconds']:.2f} s", "well under 1 s", "met" if ok else "missed"])
    return table(["goal", "setup", "measured>", "target>", ""], out)


def stagger_table(groups):
    out = []
    for g in groups:
        s, m = g["setup"], by_method(g)
        floor = s["size_bytes"] / s["host_bytes_per_s"]
        th, co = m["tensorhub"], m["collective"]
        out.append([f"{s['stagger_s'] / floor:.0f}", f"{th['total_stall_s']:.4g}", f"{co['total_stall_s']:.4g}",
                    f"{ratio(co['total_stall_s'], th['total_stall_s']):.1f}x", f"{th['makespan_s'] / th['floor_s']:.2f}"])
    return table(["ready spread (x S/B)>", "tensorhub stall (GPU-s)>", "collective stall (GPU-s)>", "ratio>",
                  "tensorhub makespan / floor>"], out)


def validation_section(v, text):
    head = ("Compared with the emulated cluster benchmark (`perf/results/cluster.json`)." if v["measured"] else
            "`perf/results/cluster.json` (the emulated cluster benchmark) does not exist yet: the simulator is "
            "compared with the physical floor and the figures measured in the emulated cluster (FACTS: 1 gbit per "
            "host, S = 256 MiB, floor 2.24 s; MPI tuned pipeline 1.01x the floor at N = 8; Redis pull N x S/B). "
            "Rows marked as a bound only have to stay above it.")
    staggered = ("- *Staggered:* the model replays the ready times the benchmark recorded (`ready_offsets_s`), "
                 "reader by reader.\n" if v.get("ready_times_replayed") else
                 "- *Staggered:* the two draw their ready times from different seeds (this benchmark run did not "
                 "record them), so at small N the last reader's ready time, which sets the makespan, differs; only "
                 "N = 8, where both spreads are nearly full, compares (4% for tensorhub).\n")
    worst = {}
    for r in v.get("rows", []):
        if r.get("bound"):
            continue
        key = (r["scenario"], r["method"])
        if key not in worst or abs(r["error"]) > abs(worst[key]["error"]):
            worst[key] = r
    lines = [f"| {sc} | {m} | {100 * r['error']:+.1f}% ({r['metric']}, n = {r['n']}"
             f"{', a CPU-bound run' if r.get('cpu_bound') else ''}) |"
             for (sc, m), r in sorted(worst.items())]
    table = "| scenario | method | largest difference |\n|---|---|---|\n" + "\n".join(lines) + "\n\n" if lines else ""
    why = (table + "How the model is set up to match the benchmark, and where it differs (a reader_stall row is "
           "the same run's stall, summed over readers from ready to done):\n\n"
           "- *Same parameters:* tensorhub's chunk size and GETs in flight are the run's (`chunk_kb`, "
           "`inflight`), the floors use the same goodput of a tbf-shaped link.\n"
           + staggered +
           "- *Store:* push then pull, as the benchmark's Redis baseline does: readers start once the whole push "
           "is in.\n"
           "- *CPU:* the model has none. The emulation runs up to ten hosts' processes on 2 cores; its N = 8 "
           "runs are at or near the CPU-bound mark, which is where tensorhub's chain and MPI's pipeline come out "
           "slower than modelled. Runs the benchmark recorded as CPU-bound (`<system>_cpu_busy` >= 0.9, "
           "recorded from this version of cluster.py on) are shown but not held to the tolerance.\n"
           "- *Trainer's mutation:* the benchmark's trainer changes its weights at time 0 (a reader reading "
           "its original drops what it has in flight and re-plans onto the owned copy); the model's trainer "
           "mutates after two S/B.")
    return (f"{head}\n\n```\n{text.strip()}\n```\n\nWithin 10% where a measurement is the reference: "
            f"**{'yes' if v['ok'] else 'no'}**.\n\n{why}")


def plots(data, out_dir):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: skipping the plots (pip install matplotlib)", file=sys.stderr)
        return []
    made = []

    def save(fig, ax, name):
        ax.legend()
        fig.tight_layout()
        path = os.path.join(out_dir, name)
        fig.savefig(path, dpi=110)
        made.append(path)

    scale = [g for g in data if g["group"] == "scale" and g["setup"]["workload"] == "standalone" and g["setup"]["stagger_s"] > 0]
    if scale:
        fig, ax = plt.subplots(figsize=(6, 4))
        for method in ["tensorhub"] + BASELINES:
            xs = [g["setup"]["gpus"] for g in scale]
            ys = [by_method(g)[method]["total_stall_s"] for g in scale]
            ax.plot(xs, ys, marker="o", label=method)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("GPUs")
        ax.set_ylabel("total GPU stall per update (GPU-s)")
        ax.set_title("Standalone rollouts, staggered")
        save(fig, ax, "sim_stall_vs_gpus.png")
    stagger = [g for g in data if g["group"] == "stagger"]
    if stagger:
        fig, ax = plt.subplots(figsize=(6, 4))
        floor = stagger[0]["setup"]["size_bytes"] / stagger[0]["setup"]["host_bytes_per_s"]
        xs = [g["setup"]["stagger_s"] / floor for g in stagger]
        ax.plot(xs, [ratio(by_method(g)["collective"]["total_stall_s"], by_method(g)["tensorhub"]["total_stall_s"])
                     for g in stagger], marker="o", label="collective / tensorhub")
        ax.axhline(GOALS["standalone"], color="gray", linestyle="--", label=f"goal {GOALS['standalone']}x")
        ax.set_xlabel("spread of ready times (x S/B)")
        ax.set_ylabel("stall ratio")
        ax.set_title("1,024 GPUs: stall of a collective vs tensorhub")
        save(fig, ax, "sim_stagger.png")
    return made


STATIC_HEAD = """# Cluster simulator

`tensorhub-sim` (perf/sim/) replays weight updates on clusters of 64 to 10,000
GPUs that this machine cannot host. It replaces only the wire and the clock:
every control message is the FlatBuffers request a client sends
(Hello, Publish, PlanFetch, FetchDone, SourceFailed, BeginMutation,
Heartbeat), handled by the real `th::Service::handle()` with its real policy
and state machine; the replies (plans naming sources) become flows in a
flow-level network model. The service reads the simulated clock through
`ServiceConfig::now_ms`, so leases and fetch durations follow simulated time.

## How to run

```
cmake --build build --target tensorhub-sim
build/perf/tensorhub-sim --smoke                 # invariants on small clusters (ctest: perf_sim_smoke)
build/perf/tensorhub-sim --validate perf/results/cluster.json
build/perf/tensorhub-sim --workload cross_dc --readers 255 --size-mb 4096 --host-gbit 200 --wan-gbit 100
perf/sim/report.py                               # re-runs everything, rewrites this page and its plots
```

A single run prints JSON (makespan, floor, stall, bytes by source kind, tree
depth, control messages by type, time inside `handle()`). `--help` lists the
options.

## Model

- **Network.** Every GPU is a host of its own with one NIC (capacity per
  direction); racks get uplinks only when `--rack-oversub` > 1 (default: full
  bisection); two datacenters are joined by one WAN link per direction. Flows
  share each link max-min fairly (progressive filling, perf/sim/fair_share.cpp,
  unit-tested on hand-computed cases). Rates are recomputed only for the
  connected component of flows a change touches; each component has one
  pending event (the first flow to reach its target or a watched byte count).
- **Readers follow the client (src/client/fetch.cpp).** A reader asks the
  server for a plan (its own buffers register as a filling replica), reads
  from the planned source only the chunks the source holds, and ends with
  FetchDone, so its replica serves the next readers while it fills. Chunks
  are 4 MiB (the library's default). The real client publishes its progress
  in its control word, not in Progress messages: a reader that serves
  confirms each chunk as it arrives (a control-word read on an endpoint of
  its own), so a follower sees its source's chunks one by one; a waiting
  follower notices new chunks after half a 200 us poll plus a 50 us round
  trip. The simulator does the same, so it
  sends no Progress messages either. A reader whose source is lost (spot
  preemption) notices after 100 ms, reports SourceFailed and re-plans the
  chunks it still misses, excluding that worker.
- **The trainer's mutation.** Two S/B after publishing (the optimizer step),
  the trainer calls BeginMutation as the client does: it waits (polling every
  5 ms, at most 5 s) until no reader is planned onto it, spilling an owned
  copy first if it holds the last complete one. That wait is its stall.
- **Baselines in the same network.** *trainer_direct*: every reader reads
  from the trainer. *collective*: a pipelined chain broadcast (MPI's tuned
  pipeline: 256 KiB segments, forwarded as they arrive) that starts when the
  last participant is ready. *store*: the trainer pushes to a store host in
  the readers' datacenter, readers pull from it once the push is complete
  (push then pull). The trainer's buffers are busy until its last direct reader is
  done (the push, the first hop of the chain).
- **Stall.** A reader stalls from the moment it is ready until it holds all
  bytes; the trainer stalls while its optimizer step waits for its buffers.
  Holders (elastic) do not stall. Total stall is the sum over GPUs.
- **Control messages** are counted per update, from the Publish to the last
  FetchDone: the rollouts' registration and the holders' earlier fetch
  (elastic_join) are not counted, the joiners' Hello is. Heartbeats are off
  in the matrix (`--heartbeat-ms` turns them on; the service then drops
  workers whose lease ran out on the simulated clock).
- **Floor.** Each reader needs S/B after it is ready: floor = last ready time
  + S/B (and S/WAN for cross-datacenter).
- **Workloads.** *standalone*: the trainer publishes, R rollouts become
  ready uniformly at random over a spread (seeded), all at once, or at
  given times (validation replays the benchmark's recorded ones).
  *elastic_join*: N workers hold the version; M join at once and fetch it.
  *cross_dc*: K rollouts in a second datacenter behind a WAN of half a NIC,
  all ready at once or over 10 x S/B.
- **Scale settings.** 25 GB/s per GPU NIC (the paper's ~25 GB/s), 2 GiB per
  GPU for the scale sweep (64, 1,024, 10,000 GPUs; ratios to the floor hardly
  depend on the size, and it keeps the 10,000-GPU chain broadcast to tens of
  seconds of simulation); the paper's setting is 1,024 GPUs with 32 and
  128 GiB per GPU (the broadcast then uses 4 MiB segments). Staggered
  rollouts are ready over 10 x S/B unless said otherwise; the stagger sweep
  shows how the comparison with a collective depends on that spread.
- **Not modelled.** Latency and loss on links, CPU limits, GPU-direct vs host
  memory, several GPUs sharing a NIC, MPI's default (linear) broadcast.
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sim", default=os.path.join(ROOT, "build", "perf", "tensorhub-sim"))
    ap.add_argument("--reuse", action="store_true", help="use perf/results/sim.json instead of simulating")
    ap.add_argument("--quick", action="store_true", help="small sizes, to try the pipeline")
    ap.add_argument("--jobs", type=int, default=max(2, os.cpu_count() or 2), help="simulations run at once")
    args = ap.parse_args()
    os.makedirs(RESULTS, exist_ok=True)
    matrix_path = os.path.join(RESULTS, "sim.json")
    if not args.reuse:
        simulate_matrix(args.sim, args.quick, args.jobs, matrix_path)
    with open(matrix_path) as f:
        data = json.load(f)
    vpath = os.path.join(RESULTS, "sim_validation.json")
    # From the repository root, so that the page names the file relative to it.
    p, _ = run([os.path.abspath(args.sim), "--validate", os.path.relpath(os.path.join(RESULTS, "cluster.json"), ROOT),
                "--json", vpath], cwd=ROOT)
    if p.returncode not in (0, 1):
        sys.exit(f"tensorhub-sim --validate failed ({p.returncode})")
    with open(vpath) as f:
        validation = json.load(f)
    made = plots(data, RESULTS)

    scale = [g for g in data if g["group"] == "scale"]
    paper = [g for g in data if g["group"] == "paper"]
    stagger = [g for g in data if g["group"] == "stagger"]
    wall = sum(r["sim_wall_s"] for g in data for r in g["results"])
    server = sum(r["handle_seconds"] for g in data for r in g["results"])
    longest = max((r["sim_wall_s"], label(g), r["method"]) for g in data for r in g["results"])
    md = [STATIC_HEAD]
    md.append("## Goals\n\n" + goals_table(scale + paper) + "\n")
    md.append(WHY)
    md.append("## Validation at 8 hosts\n\n" + validation_section(validation, p.stdout) + "\n")
    md.append("## Scale: 64, 1,024 and 10,000 GPUs (25 GB/s NICs, 2 GiB per GPU)\n\n" + scale_table(scale) + "\n")
    md.append("## The paper's setting: 1,024 GPUs, 25 GB/s, 32 and 128 GiB per GPU\n\n" + scale_table(paper) + "\n")
    md.append("## Stagger sweep (1,024 GPUs, 2 GiB)\n\n" + stagger_table(stagger) + "\n")
    md.append("## Control plane (tensorhub runs)\n\nTime is measured with the real clock around each "
              "`Service::handle()` call of the real code, on this machine (2 shared cores).\n\n" +
              control_table(scale + paper) + "\n")
    for path in made:
        md.append(f"![{os.path.basename(path)}](results/{os.path.basename(path)})\n")
    md.append(f"## Run time\n\nThe whole matrix took {wall:.0f} s on this machine (2 shared cores), {server:.0f} s of it "
              f"inside the real server's `handle()`; the longest single run: {longest[0]:.1f} s ({longest[2]}, "
              f"{longest[1]}). The server's own share is small (above). What costs is the network model: a striped "
              "reader has a flow per stripe, which joins the readers into one max-min component that is solved "
              "again at every event, so the large striped runs take minutes; the chain broadcast costs one event "
              "per 256 KiB segment per hop. The smoke run takes well under a second.\n")
    with open(os.path.join(ROOT, "perf", "SIM.md"), "w") as f:
        f.write("\n".join(md))
    print("wrote perf/SIM.md" + "".join(f", {os.path.relpath(p, ROOT)}" for p in made))


WHY = """### What limits the missed goals, and what would fix them

- **Against a collective, the gain is the waiting the collective imposes.**
  Where rollouts are ready at different times, tensorhub's readers each finish
  about S/B after they are ready (makespan at the floor, table below), while a
  collective makes every participant wait for the last one: with ready times
  spread uniformly over D, the ratio of stalls is about 1 + D / (2 S/B). The
  6.7x goal therefore needs a spread of about 11-12 x S/B; at 10 x S/B it is
  just below, at 20 x S/B well above (stagger sweep). This is a property of
  the workload, not of the implementation: state the spread with the claim.
- **Readers that start together: trees of stripes, each hop K chunks long.**
  With one source per reader, readers ready at once formed one chain as deep
  as the number of readers, and the makespan was about S/B + N x chunk / B:
  4.8x of the floor at 1,024 GPUs. The server now cuts a shard into 8 stripes
  when 24 workers or more are registered (docs/design.md, "Fan-out depth"):
  each stripe is relayed along a tree of depth ~log N, and every relay sends
  about one shard. Two things kept the first trees at 1.2x: room is tight
  (N places for N - 1 readers per stripe, and one stripe's relays fall a few
  places short when N - 1 is not a multiple of 8), so a few relays took a
  ninth reader and slowed their subtrees to 8/9; and leaves took places near
  the top that relays needed. Now a relay of another stripe with room sends
  the short stripe, and leaves take only relays nobody reads from in their
  first plan: 1.07x at 1,024 GPUs, 1.09x at 10,000 (depth 6 and 7). What is
  left is the pipeline's fill: a stripe flows at 1/8 of a link, so a hop of
  its tree costs 8 chunks' time (1.3 ms for 4 MiB at 25 GB/s), plus the
  200 us poll and 50 us round trip the model gives each hop. With 1 MiB
  chunks the same runs finish at 1.02x (1,024 GPUs) and 1.03x (10,000,
  `--chunk-kb 1024`). The 2 ms the top of each tree
  waits before asking for the stripes it does not relay is not on the
  critical path (`--stripe-wait-ms 0.1` gives the same makespan). A
  pipelined collective (256 KiB segments) pays 10 us a hop. What would
  close the rest: a smaller read unit for stripe relays (a hop is one chunk
  at B/K).
- **Planning is no longer linear in the number of replicas.** Each shard
  indexes its holders by host, rack and zone and keeps them in the policy's
  load order per datacenter, so a plan looks at the reader's neighbours and
  then at the first eligible holder. Planning an update of 10,000 readers
  takes 0.05-0.25 s of the server's own time in total (control-plane table).
"""

if __name__ == "__main__":
    main()
