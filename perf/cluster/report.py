#!/usr/bin/env python3
"""Regenerates perf/RESULTS.md and perf/results/cluster_*.png from
perf/results/cluster.json (written by `cluster.py --out`). The hand-written
analysis in perf/cluster/NOTES.md is appended as it is. Without matplotlib
the tables are still written, and plots already in perf/results are linked
as they are.

--merge FILE takes the scenarios of another run (e.g. `cluster.py --only
prefetch --out FILE`) into the JSON first, replacing the entries of those
scenarios, so that one scenario can be measured again without the others.

  report.py [--json perf/results/cluster.json] [--out perf/RESULTS.md] [--merge FILE]
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PERF = os.path.dirname(HERE)

SYSTEMS = [("tensorhub", "tensorhub"), ("trainer_direct", "trainer-direct (UCX p2p)"),
           ("mpi_default", "MPI_Bcast (default)"), ("mpi_tuned", "MPI_Bcast (tuned pipeline)"), ("redis", "Redis")]


def entries(data, scenario):
    return [e for e in data["scenarios"] if e["scenario"] == scenario]


def fmt(v, digits=2):
    return "–" if v is None else f"{v:.{digits}f}"


def time_table(rows, key):
    present = [(k, name) for k, name in SYSTEMS if any(f"{k}_s" in e for e in rows)]
    head = f"| {key} | floor s | " + " | ".join(f"{name} s" for _, name in present) + \
        " | tensorhub / floor | CPU-bound |"
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for e in rows:
        cells = [str(e.get(key.lower(), "")), fmt(e["floor_s"])]
        cells += [with_range(e, k) for k, _ in present]
        cells += [fmt(e["ratio_tensorhub_floor"]) + "x", "yes" if e["cpu_bound"] else "no"]
        out.append("| " + " | ".join(cells) + " |")
    return out


def with_range(e, k):
    """A system's seconds; with several rounds, the median run's and the range."""
    rounds = e.get(f"{k}_s_rounds")
    if not rounds or len(rounds) < 2:
        return fmt(e.get(f"{k}_s"))
    return f"{fmt(e.get(f'{k}_s'))} ({fmt(min(rounds))}-{fmt(max(rounds))})"


def stall_table(rows):
    present = [(k, name) for k, name in SYSTEMS if any(f"{k}_reader_stall_s" in e for e in rows)]
    head = "| N | " + " | ".join(f"{name}: readers + trainer s" for _, name in present) + " | CPU-bound |"
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for e in rows:
        cells = [str(e["n"])]
        for k, _ in present:
            r, t = e.get(f"{k}_reader_stall_s"), e.get(f"{k}_trainer_stall_s")
            cells.append("–" if r is None else f"{r:.2f} + {t:.2f} = {r + t:.2f}")
        cells.append("yes" if e["cpu_bound"] else "no")
        out.append("| " + " | ".join(cells) + " |")
    return out


def prefetch_table(rows):
    head = ("| N | readers use v1 for | plain: stall summed (worst reader) s | prefetch: stall summed (worst reader) s "
            "| prefetch done after v2, worst s | CPU-bound |")
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for e in rows:
        out.append(f"| {e['n']} | {e['use_of_floor']:g} x S/B = {e['use_s']:.2f} s | "
                   f"{e['plain_reader_stall_s']:.3f} ({e['plain_max_stall_s']:.3f}) | "
                   f"{e['prefetch_reader_stall_s']:.6f} ({e['prefetch_max_stall_s']:.6f}) | "
                   f"{e['prefetch_fetched_max_s']:.2f} | {'yes' if e['cpu_bound'] else 'no'} |")
    return out


def worst_within(rows, key, goal, limit):
    worst = max(rows, key=lambda e: e["ratio_tensorhub_floor"])
    return (goal, f"worst {worst['ratio_tensorhub_floor']:.3f}x at {key.upper()}={worst[key]}",
            worst["ratio_tensorhub_floor"] <= limit)


def goals(data):
    """(goal, measured, met) rows; a goal without data is left out."""
    out = []
    ready = entries(data, "standalone_ready")
    if ready:
        out.append(worst_within(ready, "n", "standalone, all ready: within 1.05x of S/B for every N", 1.05))
        n8 = [e for e in ready if e["n"] == max(x["n"] for x in ready)]
        if n8 and "mpi_tuned_s" in n8[0]:
            e = n8[0]
            runs = f" (median of {e['rounds']} rounds)" if e.get("rounds", 1) > 1 else ""
            out.append((f"standalone, all ready at N={e['n']}: <= 1.10x of S/B and faster than tuned MPI_Bcast",
                        f"{e['ratio_tensorhub_floor']:.3f}x, tuned MPI_Bcast {e['mpi_tuned_s'] / e['floor_s']:.3f}x"
                        f"{runs}",
                        e["ratio_tensorhub_floor"] <= 1.10 and e["tensorhub_s"] < e["mpi_tuned_s"]))
        if n8 and "trainer_direct_s" in n8[0]:
            e = n8[0]
            want = 0.8 * e["n"]
            out.append((f"standalone, all ready: >= {want:.1f}x faster than trainer-direct at N={e['n']}",
                        f"{e['speedup_vs_trainer_direct']:.2f}x", e["speedup_vs_trainer_direct"] >= want))
    stag = entries(data, "standalone_staggered")
    if stag:
        worst = max(stag, key=lambda e: e["tensorhub_reader_stall_s"] / (e["n"] * e["floor_s"]))
        ratio = worst["tensorhub_reader_stall_s"] / (worst["n"] * worst["floor_s"])
        out.append(("staggered: readers' total stall within 1.05x of its bound N x S/B for every N",
                    f"worst {ratio:.3f}x at N={worst['n']}", ratio <= 1.05))
        e = max(stag, key=lambda x: x["n"])
        if "stall_ratio_vs_mpi_default" in e:
            # Every reader needs S/B after it is ready: no system stalls less
            # than N x S/B in total, which bounds the ratio any system can reach.
            bound = (e["mpi_default_reader_stall_s"] + e["mpi_default_trainer_stall_s"]) / (e["n"] * e["floor_s"])
            out.append((f"staggered: reader + trainer stall >= 6.7x lower than MPI_Bcast at N={e['n']}",
                        f"{e['stall_ratio_vs_mpi_default']:.2f}x (default), "
                        f"{e.get('stall_ratio_vs_mpi_tuned', 0):.2f}x (tuned); at most {bound:.2f}x is possible "
                        f"against this MPI run (total stall >= N x S/B)",
                        e["stall_ratio_vs_mpi_default"] >= 6.7))
    stalls = [(e["tensorhub_trainer_stall_s"], f"{e['scenario']} N={e['n']}")
              for e in entries(data, "standalone_ready") + entries(data, "standalone_staggered")]
    stalls += [(e["tensorhub_spill_ahead_trainer_stall_s"], f"trainer_step N={e['n']}, copy made ahead")
               for e in entries(data, "trainer_step")]
    if stalls:
        worst = max(stalls)
        out.append(("trainer stall <= 0.2 s at every N (mutating at once, or after its next step with the copy "
                    "made ahead)", f"worst {worst[0]:.3f} s ({worst[1]})", worst[0] <= 0.2))
    el = entries(data, "elastic_join")
    for e in el:
        out.append((f"elastic join (N={e['n']}, M={e['m']}): within 1.05x of S/B",
                    f"{e['ratio_tensorhub_floor']:.3f}x", e["ratio_tensorhub_floor"] <= 1.05))
    cd = entries(data, "cross_dc")
    if cd:
        out.append(worst_within(cd, "k", "cross-datacenter: within 1.05x of S/L for any K", 1.05))
    pre = [e for e in entries(data, "prefetch") if e["use_of_floor"] >= 1]
    if pre:
        worst = max(pre, key=lambda e: e["prefetch_max_stall_s"] / e["floor_s"])
        out.append(("background prefetch: a reader that uses v for >= S/B after v+1 is published waits "
                    "< 1% of S/B for it",
                    f"worst {worst['prefetch_max_stall_s'] * 1e3:.3f} ms ({worst['prefetch_max_stall_s'] / worst['floor_s']:.4%} "
                    f"of S/B) at N={worst['n']}, against {worst['plain_max_stall_s']:.2f} s plain",
                    worst["prefetch_max_stall_s"] < 0.01 * worst["floor_s"]))
    return out


def plots(data, out_dir):
    """Writes the PNGs; returns their file names (empty without matplotlib)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    made = []

    def save(fig, name):
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, name), dpi=110)
        plt.close(fig)
        made.append(name)

    for scenario, key, title in (("standalone_ready", "n", "Standalone rollout, all readers ready"),
                                 ("standalone_staggered", "n", "Standalone rollout, staggered readiness"),
                                 ("cross_dc", "k", "Cross-datacenter (L = B/10)")):
        rows = sorted(entries(data, scenario), key=lambda e: e[key])
        if not rows:
            continue
        fig, ax = plt.subplots(figsize=(6, 4))
        xs = [e[key] for e in rows]
        for k, name in SYSTEMS:
            if all(f"{k}_s" in e for e in rows):
                ax.plot(xs, [e[f"{k}_s"] for e in rows], marker="o", label=name)
        ax.plot(xs, [e["floor_s"] for e in rows], "k--", label="floor (S/B)" if key == "n" else "floor (S/L)")
        ax.set_xlabel("readers N" if key == "n" else "dc2 hosts K")
        ax.set_ylabel("seconds to the last reader")
        ax.set_xticks(xs)
        ax.set_title(title)
        ax.legend(fontsize=8)
        save(fig, f"cluster_{scenario}.png")
    rows = sorted(entries(data, "standalone_staggered"), key=lambda e: e["n"])
    if rows:
        fig, ax = plt.subplots(figsize=(6, 4))
        xs = [e["n"] for e in rows]
        for k, name in SYSTEMS:
            if all(f"{k}_reader_stall_s" in e for e in rows):
                ax.plot(xs, [e[f"{k}_reader_stall_s"] + e[f"{k}_trainer_stall_s"] for e in rows], marker="o", label=name)
        ax.plot(xs, [e["floor_s"] * e["n"] for e in rows], "k--", label="floor (N x S/B)")
        ax.set_xlabel("readers N")
        ax.set_ylabel("reader stall + trainer stall, s")
        ax.set_xticks(xs)
        ax.set_title("Staggered readiness: total stall")
        ax.legend(fontsize=8)
        save(fig, "cluster_stall.png")
    return made


def render(data, images, notes, server_notes):
    s0 = data["scenarios"][0] if data["scenarios"] else {}
    lines = ["# Benchmark results", "",
             "Emulated cluster benchmarks first, then the metadata server under load "
             "([below](#metadata-server-under-load)).", "",
             "Generated by `perf/cluster/report.py` from `perf/results/cluster.json`, which "
             "`perf/cluster/cluster.py --out perf/results/cluster.json` writes (run as root; "
             "see [perf/cluster/NOTES.md](cluster/NOTES.md) for the method). Do not edit by hand: "
             "edit perf/cluster/NOTES.md or perf/server_load/NOTES.md and regenerate.", "",
             f"Mode `{data.get('mode')}`, {data.get('cpus')} CPUs, S = {s0.get('size_bytes', 0) >> 20} MiB, "
             f"B = {s0.get('host_gbit')} gbit per host, tensorhub chunk {data.get('chunk_kb')} KiB with "
             f"{data.get('inflight')} GETs in flight. Floors use the goodput of a tbf-shaped link "
             "(1448 payload bytes per 1514-byte frame)."]
    pair = data.get("single_pair")
    if pair:
        lines += ["", f"Calibration: a single trainer-direct pair reached {pair['single_pair_of_floor']:.1%} of B "
                  f"goodput ({'within' if pair['within_5pct'] else 'NOT within'} 5%)."]
    lines += ["", "## Goals", "", "| goal | measured | met |", "|---|---|---|"]
    for goal, measured, met in goals(data):
        lines.append(f"| {goal} | {measured} | {'yes' if met else '**no**'} |")
    sections = [("standalone_ready", "Standalone rollout, all readers ready (seconds to the last reader)", "N"),
                ("standalone_staggered", "Standalone rollout, staggered readiness (seconds to the last reader)", "N"),
                ("elastic_join", "Elastic join (M joiners, N holders; seconds to the last joiner)", "M"),
                ("cross_dc", "Cross-datacenter (K hosts in dc2; seconds to the last)", "K")]
    for scenario, title, key in sections:
        rows = entries(data, scenario)
        if not rows:
            continue
        lines += ["", f"## {title}", ""]
        if scenario == "cross_dc":
            lines.append(f"S = {rows[0]['size_bytes'] >> 20} MiB, L = {rows[0]['wan_gbit']:g} gbit.")
            lines.append("")
        lines += time_table(rows, key)
        if scenario.startswith("standalone"):
            lines += ["", "Stalls (reader stall summed over readers; trainer stall from T0):", ""]
            lines += stall_table(rows)
        if f"cluster_{scenario}.png" in images:
            lines += ["", f"![{title}](results/cluster_{scenario}.png)"]
        if scenario == "standalone_staggered" and "cluster_stall.png" in images:
            lines += ["", "![Total stall](results/cluster_stall.png)"]
    rows = entries(data, "trainer_step")
    if rows:
        lines += ["", "## Trainer stall when it mutates after its next step", "",
                  "Every reader ready at T0; tensorhub's trainer works for the step below between publishing and "
                  "mutating (its next forward and backward), so the readers are still fetching when it mutates and "
                  "the version is spilled. Stall: what the trainer waits for in the publish and the begin-mutation.",
                  "", "| N | step s | makespan x floor | trainer stall, copy at the mutation s | "
                  "trainer stall, copy made ahead s | CPU-bound |", "|---|---|---|---|---|---|"]
        for e in rows:
            lines.append(f"| {e['n']} | {e['step_s']:.2f} | {e['ratio_tensorhub_floor']:.3f} | "
                         f"{e['tensorhub_trainer_stall_s']:.3f} | {e['tensorhub_spill_ahead_trainer_stall_s']:.3f} | "
                         f"{'yes' if e['cpu_bound'] else 'no'} |")
    rows = sorted(entries(data, "prefetch"), key=lambda e: (e["n"], e["use_of_floor"]))
    if rows:
        e = rows[0]
        lines += ["", "## Background prefetch (reader stall for the next version)", "",
                  f"Mode `{e.get('mode')}`, S = {e['size_bytes'] >> 20} MiB, B = {e['host_gbit']:g} gbit, S/B = "
                  f"{e['floor_s']:.2f} s. The trainer publishes version 2 {e['interval_s']:.2f} s after version 1; "
                  "each reader keeps using version 1 for U after that and then wants version 2. Plain: it waits "
                  "for and fetches version 2 then. Prefetch: a thread fetched version 2 into a spare buffer set "
                  "(serving it on) while version 1 was in use and served; the reader swaps the sets. Stall: from "
                  "wanting version 2 to holding it in the live buffers.", ""]
        lines += prefetch_table(rows)
    lines += ["", notes.strip(), "", server_notes.strip(), ""]
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--json", default=os.path.join(PERF, "results", "cluster.json"))
    p.add_argument("--out", default=os.path.join(PERF, "RESULTS.md"))
    p.add_argument("--merge", help="a cluster.py JSON whose scenarios replace those of --json (which is rewritten)")
    a = p.parse_args()
    with open(a.json) as f:
        data = json.load(f)
    if a.merge:
        with open(a.merge) as f:
            extra = json.load(f)["scenarios"]
        kinds = {e["scenario"] for e in extra}
        data["scenarios"] = [e for e in data["scenarios"] if e["scenario"] not in kinds] + extra
        with open(a.json + ".tmp", "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
        os.replace(a.json + ".tmp", a.json)
    results_dir = os.path.dirname(os.path.abspath(a.json))
    images = plots(data, results_dir)
    if not images:
        images = [n for n in sorted(os.listdir(results_dir)) if n.startswith("cluster_") and n.endswith(".png")]
    with open(os.path.join(HERE, "NOTES.md")) as f:
        notes = f.read()
    # The server-load section is written by hand from tensorhub-server-load's
    # --markdown tables (its figures come from a different program).
    with open(os.path.join(PERF, "server_load", "NOTES.md")) as f:
        server_notes = f.read()
    with open(a.out, "w") as f:
        f.write(render(data, images, notes, server_notes))
    print(f"wrote {a.out}" + (f" with {len(images)} plots" if images else " (no plots)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
