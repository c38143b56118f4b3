#!/usr/bin/env python3
"""Where a chain's per-hop lag goes, from the library's event trace.

Run the cluster benchmark (or any job) with TENSORHUB_TRACE_DIR set: every
process writes trace-<pid>.tsv there (src/common/trace.hpp). All processes of
one host share CLOCK_MONOTONIC, so the events of a relay and of its follower
lie on one time line. For each hop (a reader P that serves, and a reader C
that reads from it) and each chunk c this splits the time from "P confirmed
c" to "C confirmed c" into:

  notice    P advanced its fill level past c -> C's control-word read of P
            first showed it (C's poll period plus the read's round trip;
            0 for a waiting read, asked for before P held c)
  ask       -> C asked P for c (C's window to P was full: the link is busy)
  transfer  -> c landed at C (queueing at P's egress plus the chunk; for a
            waiting read, from P holding c)
  confirm   -> C confirmed c (its control-word read of P after the data; 0
            for a guarded read confirmed as it landed)

and the control-word reads into their two legs (C -> P's handler, and the
answer back). Medians and 90th percentiles per hop, then over all hops.

    TENSORHUB_TRACE_DIR=/tmp/tr python3 perf/cluster/cluster.py --only standalone --ns 8 --baselines ""
    python3 perf/cluster/hop_profile.py /tmp/tr [--json out.json]
"""
import argparse
import bisect
import collections
import glob
import json
import os
import statistics
import sys


class Proc:
    def __init__(self, path):
        self.path = path
        self.worker = None
        self.fetches = []  # [(start_ns, end_ns)]
        self.events = []   # (t, name, a, b, c, d)
        with open(path) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) != 6:
                    continue  # a line cut short by a kill
                t, name = int(parts[0]), parts[1]
                a, b, c, d = (int(x) for x in parts[2:])
                if name == "worker":
                    self.worker = a
                self.events.append((t, name, a, b, c, d))
        start = None
        for t, name, *_ in self.events:
            if name == "fetch":
                start = t
            elif name == "fetch_end" and start is not None:
                self.fetches.append((start, t))
                start = None

    def in_fetch(self, i):
        """Events of the i-th fetch of this process."""
        lo, hi = self.fetches[i]
        return [e for e in self.events if lo <= e[0] <= hi]


def first_after(times, t):
    """The first time in sorted `times` at or after t, or None."""
    i = bisect.bisect_left(times, t)
    return times[i] if i < len(times) else None


def pct(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def ms(ns):
    return None if ns is None else ns / 1e6


def load(folder):
    return [Proc(p) for p in sorted(glob.glob(os.path.join(folder, "trace-*.tsv")))]


def summarize(folder, fetch_index=0):
    """The run's figures for a results entry: how many readers the trace
    shows, how long each took from starting its fetch to asking for its
    first chunk (ms, sorted), and the per-hop medians and 90th percentiles."""
    procs = load(folder)
    _, summary = analyse(procs, fetch_index)
    first = []
    for p in procs:
        if len(p.fetches) > fetch_index:
            lo, hi = p.fetches[fetch_index]
            asks = [t for t, name, *_ in p.events if name == "read_ask" and lo <= t <= hi]
            if asks:
                first.append(round((min(asks) - lo) / 1e6, 2))
    summary["readers"] = sum(1 for p in procs if len(p.fetches) > fetch_index)
    summary["first_read_ms"] = sorted(first)
    for k in ("median_ms", "p90_ms"):
        summary[k] = {c: round(v, 3) for c, v in summary[k].items()}
    return summary


def analyse(procs, fetch_index):
    readers = {p.worker: p for p in procs if p.worker is not None and len(p.fetches) > fetch_index}
    by_worker = {p.worker: p for p in procs if p.worker is not None}
    per = {}
    for w, p in readers.items():
        ev = p.in_fetch(fetch_index)
        d = collections.defaultdict(dict)
        d["ctrl_asks"] = collections.defaultdict(list)  # source -> [(t, addr)]
        d["ctrl_ans"] = collections.defaultdict(list)   # source -> [(t, avail)]
        d["fill"] = []                                  # (t, prefix)
        src_bytes = collections.Counter()
        for t, name, a, b, c, _ in ev:
            if name == "read_ask":
                d["ask"][(a, b)] = t
            elif name == "read_done":
                d["land"][(a, b)] = t
                src_bytes[a] += 1
            elif name == "confirm":
                d["conf"][b] = (t, a)
            elif name == "ctrl_ask":
                d["ctrl_asks"][a].append((t, b))
            elif name == "ctrl_ans":
                d["ctrl_ans"][a].append((t, b))
            elif name == "fill":
                d["fill"].append((t, a))
        d["parent"] = src_bytes.most_common(1)[0][0] if src_bytes else None
        d["start"], d["end"] = p.fetches[fetch_index]
        per[w] = d

    hops = []
    for w, d in per.items():
        parent = d["parent"]
        if parent not in per:
            continue  # reads from the publisher (complete): no relay to wait for
        pd = per[parent]
        fills = pd["fill"]
        answers = d["ctrl_ans"][parent]
        rows = collections.defaultdict(list)
        for c, (conf_t, src) in sorted(d["conf"].items()):
            if src != parent or c not in pd["conf"]:
                continue
            p_conf = pd["conf"][c][0]
            p_fill = next((t for t, prefix in fills if prefix > c), None)
            ask = d["ask"].get((parent, c))
            land = d["land"].get((parent, c))
            if None in (p_fill, ask, land):
                continue
            if ask <= p_fill:
                seen = p_fill  # asked ahead (a waiting read): answered once the parent held it
            else:
                seen = next((t for t, avail in answers if avail > c and t >= p_fill), None)
                if seen is None:
                    continue
            rows["lag"].append(conf_t - p_conf)
            rows["notice"].append(seen - p_fill)
            rows["ask"].append(max(0, ask - seen))
            rows["transfer"].append(land - max(ask, seen))
            rows["confirm"].append(conf_t - land)
            rows["relay_fill"].append(p_fill - p_conf)
        # Control-word reads of the parent: request leg (to the parent's
        # handler, traced as "serve") and answer leg.
        serves = sorted(t for t, name, a, b, *_ in by_worker[parent].events
                        if name == "serve" and b in (16, 64, 72) and d["start"] <= t <= d["end"])
        req_leg, ans_leg, rtt = [], [], []
        ans_times = [t for t, _ in answers]
        for t_ask, _addr in d["ctrl_asks"][parent]:
            t_ans = first_after(ans_times, t_ask)
            if t_ans is None:
                continue
            rtt.append(t_ans - t_ask)
            t_srv = first_after(serves, t_ask)
            if t_srv is not None and t_srv <= t_ans:
                req_leg.append(t_srv - t_ask)
                ans_leg.append(t_ans - t_srv)
        rows["ctrl_rtt"], rows["ctrl_request_leg"], rows["ctrl_answer_leg"] = rtt, req_leg, ans_leg
        polls = sorted(t for t, _ in d["ctrl_asks"][parent])
        rows["ctrl_interval"] = [b - a for a, b in zip(polls, polls[1:])]
        last = max(d["conf"])
        hops.append({"reader": w, "parent": parent,
                     "done_gap_ms": ms(d["conf"][last][0] - pd["conf"][last][0]) if last in pd["conf"] else None,
                     "chunks": len(rows["lag"]),
                     "median_ms": {k: ms(statistics.median(v)) for k, v in rows.items() if v},
                     "p90_ms": {k: ms(pct(v, 0.9)) for k, v in rows.items() if v},
                     "_rows": rows})
    # Order hops along the chain(s): by when the reader finished.
    hops.sort(key=lambda h: per[h["reader"]]["end"])
    total = collections.defaultdict(list)
    for h in hops:
        for k, v in h.pop("_rows").items():
            total[k] += v
    summary = {"hops": len(hops),
               "median_ms": {k: ms(statistics.median(v)) for k, v in total.items() if v},
               "p90_ms": {k: ms(pct(v, 0.9)) for k, v in total.items() if v}}
    return hops, summary


COLUMNS = ["lag", "relay_fill", "notice", "ask", "transfer", "confirm", "ctrl_rtt", "ctrl_request_leg",
           "ctrl_answer_leg", "ctrl_interval"]


def fmt(v):
    return "-" if v is None else f"{v:.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", help="TENSORHUB_TRACE_DIR of the run")
    ap.add_argument("--fetch", type=int, default=0, help="which fetch of each reader process (0: the first)")
    ap.add_argument("--json", help="write the figures here too")
    a = ap.parse_args()
    procs = load(a.dir)
    if not procs:
        print(f"no trace-*.tsv in {a.dir}", file=sys.stderr)
        return 2
    hops, summary = analyse(procs, a.fetch)
    print("per hop, median ms (90th percentile for the whole run below); columns: " + ", ".join(COLUMNS))
    print("reader <- parent            done gap  " + "  ".join(f"{c[:10]:>10}" for c in COLUMNS))
    for h in hops:
        print(f"{h['reader'] % 100000:>6} <- {h['parent'] % 100000:>6} {h['chunks']:>5} ch  "
              f"{fmt(h['done_gap_ms']):>8}  " + "  ".join(f"{fmt(h['median_ms'].get(c)):>10}" for c in COLUMNS))
    print(f"all {summary['hops']} hops, median       " + "  ".join(f"{fmt(summary['median_ms'].get(c)):>10}" for c in COLUMNS))
    print(f"all {summary['hops']} hops, p90          " + "  ".join(f"{fmt(summary['p90_ms'].get(c)):>10}" for c in COLUMNS))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"hops": hops, "summary": summary}, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
