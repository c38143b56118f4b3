#!/usr/bin/env python3
"""Emulated multi-host cluster benchmark: tensorhub against real baselines.

Builds hosts as network namespaces (perf/cluster/netns.py), each with one NIC
shaped to B in both directions, and runs, side by side on the same hosts with
the same S bytes:

  standalone   one trainer publishes S; N rollout hosts fetch it, all ready at
               T0 or ready at seeded random times in [0, 3 S/B]. tensorhub vs
               trainer-direct (UCX GETs from the trainer), MPI_Bcast (Open MPI,
               default and tuned pipelined), Redis (push then pull).
  trainer_step as standalone with every reader ready at the largest N, but
               tensorhub's trainer works 0.5 S/B between publishing and
               mutating (its next forward and backward): its stall with the
               owned copy made at the mutation, and made ahead
               (th_client_config.spill_ahead).
  elastic      N hosts already hold the version; M new hosts join and fetch
               it. tensorhub vs trainer-direct.
  cross_dc     trainer in dc1, K hosts in dc2 behind a link L = B/10.
               tensorhub vs trainer-direct.
  prefetch     the trainer publishes version 2 while N readers use version 1;
               each wants version 2 U seconds later. tensorhub fetching it
               then (plain) vs a background thread that fetched it into spare
               buffers meanwhile (prefetch): the reader stall is the swap.

Prints a table per scenario and, last, one JSON line with every figure.
Needs root (namespaces, tc); exits 77 (skipped) without them.

  cluster.py [--smoke | --quick] [--bin-dir DIR] [--server-bin PATH]
             [--size-mb S] [--gbit B] [--ns 1,2,4,8] [--only standalone,trainer_step,elastic,cross_dc,prefetch]
             [--chunk-kb C] [--inflight I] [--nic-queue-ms Q] [--seed N] [--repeat K] [--out results.json]
"""

import argparse
import atexit
import dataclasses
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import netns  # noqa: E402
import procs  # noqa: E402
import hop_profile  # noqa: E402
import systems  # noqa: E402

SKIP = 77
CPU_BOUND = 0.90  # busy fraction of all CPUs above which a run is not bandwidth-bound
PAIR_TOLERANCE = 0.05
# Seconds every system of a side-by-side round waits before it starts. Tuned
# MPI_Bcast started right after tensorhub took 1.040-1.234x of S/B in six
# rounds at N = 8, and 1.011-1.044x five seconds later (the CPUs were idle
# within 0.25 s either way): the hosts' kernels keep something of the last
# system for a few seconds, which the next one pays.
SYSTEM_GAP_S = 3.0
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# How the baselines are called in the output and in results JSON.
BASELINES = {"trainer_direct": "trainer-direct", "mpi_default": "MPI_Bcast", "mpi_tuned": "MPI_Bcast tuned",
             "redis": "Redis", "tensorhub_prefetch": "tensorhub prefetch",
             "tensorhub_spill_ahead": "tensorhub ahead", "tensorhub_cold_connect": "tensorhub cold"}


def floor_s(size, gbit):
    """S over the goodput of a link shaped to gbit (tbf counts whole frames)."""
    return size / (gbit * 1e9 / 8 * netns.GOODPUT)


class Bench:
    def __init__(self, args):
        self.args = args
        self.rows = []        # printed table rows
        self.scenarios = []   # JSON entries
        self.workdir = tempfile.mkdtemp(prefix="tensorhub-cluster-")

    def setup(self, net, size):
        a = self.args
        return systems.Setup(net=net, bin_dir=a.bin_dir, server_bin=a.server_bin, workdir=self.workdir, size=size,
                             chunk_kb=a.chunk_kb, inflight=a.inflight, timeout=120 + 40 * floor_s(size, a.gbit) * 10,
                             trainer_keeps=a.trainer_keeps, trainer_step_s=a.trainer_step_s,
                             spill_ahead=a.spill_ahead,
                             trace_dir=a.trace or (os.path.join(self.workdir, "trace") if a.smoke else ""),
                             stripes=a.stripes)

    def record(self, entry, runs):
        """Adds a scenario entry: per system its seconds and stalls, the
        floor, the ratios, and whether any run was CPU-bound."""
        th = runs["tensorhub"]
        entry["tensorhub_s"] = th.makespan_s
        if "done_s" in th.detail:
            entry["tensorhub_done_s"] = [round(t, 4) for t in th.detail["done_s"]]
        if "fetches" in th.detail:
            entry["tensorhub_fetches"] = [dict(f, done_s=round(f["done_s"], 4)) for f in th.detail["fetches"]]
        if "mutation_s" in th.detail:
            entry["tensorhub_mutation_s"] = th.detail["mutation_s"]
        entry["ratio_tensorhub_floor"] = th.makespan_s / entry["floor_s"]
        # Hops of readers that start together (a chain, or trees of stripes).
        if "trace_dir" in th.detail and entry["scenario"] in ("standalone_ready", "trainer_step"):
            entry["tensorhub_hops"] = hop_profile.summarize(th.detail["trace_dir"])
            if entry["scenario"] == "standalone_ready" and entry["tensorhub_hops"]["readers"] != entry["n"]:
                raise RuntimeError(f"the trace of {entry['scenario']} n={entry['n']} shows "
                                   f"{entry['tensorhub_hops']['readers']} readers")
        for name, run in runs.items():
            if name != "tensorhub":
                entry[f"{name}_s"] = run.makespan_s
                entry[f"speedup_vs_{name}"] = run.makespan_s / th.makespan_s
            entry[f"{name}_reader_stall_s"] = run.reader_stall_s
            entry[f"{name}_trainer_stall_s"] = run.trainer_stall_s
            entry[f"{name}_cpu_busy"] = run.cpu_busy
        if entry["scenario"] == "standalone_staggered":
            ours = th.reader_stall_s + th.trainer_stall_s
            for name, run in runs.items():
                if name != "tensorhub":
                    entry[f"stall_ratio_vs_{name}"] = (run.reader_stall_s + run.trainer_stall_s) / max(ours, 1e-9)
        entry["cpu_busy_max"] = max(r.cpu_busy for r in runs.values())
        entry["loadavg_1min"] = os.getloadavg()[0]
        entry["cpu_bound"] = entry["cpu_busy_max"] >= CPU_BOUND
        entry["verified"] = all(r.verified for r in runs.values())
        if self.failed:
            entry["failed_baselines"], self.failed = sorted(set(self.failed)), []
        self.scenarios.append(entry)
        self.save()
        label = entry["scenario"] + " " + " ".join(f"{k}={entry[k]}" for k in ("n", "m", "k") if k in entry)
        for name, run in runs.items():
            self.rows.append((label, BASELINES.get(name, "tensorhub"), run, entry["floor_s"]))
            print(self._row(*self.rows[-1]), flush=True)
        if not entry["verified"]:
            raise RuntimeError(f"{label}: a reader holds wrong bytes")

    @staticmethod
    def header():
        return (f"{'scenario':<30} {'system':<16} {'time s':>8} {'floor s':>8} {'x floor':>8} "
                f"{'reader stall s':>15} {'trainer stall s':>16} {'CPU busy':>9}")

    @staticmethod
    def _row(label, system, run, floor):
        flag = " CPU-BOUND" if run.cpu_busy >= CPU_BOUND else ""
        return (f"{label:<30} {system:<16} {run.makespan_s:8.3f} {floor:8.3f} {run.makespan_s / floor:8.3f} "
                f"{run.reader_stall_s:15.3f} {run.trainer_stall_s:16.3f} {run.cpu_busy:8.0%}{flag}")

    # -----------------------------------------------------------------------

    def _one_dc(self, readers):
        """One datacenter: the metadata host, the trainer and `readers` hosts,
        every NIC shaped to B; returns them with the run's setup."""
        a = self.args
        net = netns.Network(self.args.nic_queue_ms)
        self.networks.append(net)
        net.add_dc("dc1")
        meta = net.add_host("meta", "dc1", a.gbit)
        trainer = net.add_host("trainer", "dc1", a.gbit)
        pool = [net.add_host(f"r{i + 1}", "dc1", a.gbit) for i in range(readers)]
        return net, meta, trainer, pool, self.setup(net, a.size)

    def standalone(self):
        a = self.args
        net, meta, trainer, pool, s = self._one_dc(max(max(a.ns), a.elastic_n + a.elastic_m))
        floor = floor_s(a.size, a.gbit)
        if {"standalone", "standalone_ready"} & a.only:
            variants = ("ready", "staggered") if "standalone" in a.only else ("ready",)
            for n in a.ns:
                readers = pool[:n]
                rng = random.Random(a.seed * 1000 + n)
                # Rounded as the programs are told them (microseconds), so
                # the entry records exactly the times that were used.
                spread = [round(rng.uniform(0, 3 * floor), 6) for _ in readers]
                for variant, offsets in (("ready", [0.0] * n), ("staggered", spread)):
                    if variant not in variants:
                        continue
                    # Readers that start together are where the systems are
                    # closest and a 2-core machine's noise largest: --repeat
                    # runs every system that many times, round by round.
                    rounds = a.repeat if variant == "ready" else 1
                    runs, spread_of = median_runs([self.standalone_round(s, meta, trainer, readers, offsets, variant)
                                                   for _ in range(rounds)])
                    entry = {"scenario": f"standalone_{variant}", "n": n, "size_bytes": a.size,
                             "host_gbit": a.gbit, "floor_s": floor, "seed": a.seed, "ready_offsets_s": offsets}
                    if rounds > 1:
                        entry["rounds"] = rounds
                        entry.update(spread_of)
                    self.record(entry, runs)
                    if n == 1 and variant == "ready" and "trainer_direct" in runs:
                        self.check_pair(runs["trainer_direct"], floor)
        if "trainer_step" in a.only:
            # The trainer works 0.5 S/B between publishing and mutating (its
            # next forward and backward), so the readers are mid-way when it
            # mutates: the spill copies at the mutation, or was made ahead.
            n = max(a.ns)
            step = 0.5 * floor
            runs = {name: systems.tensorhub(dataclasses.replace(s, trainer_step_s=step, spill_ahead=ahead), meta,
                                            trainer, pool[:n], [0.0] * n)
                    for name, ahead in (("tensorhub", False), ("tensorhub_spill_ahead", True))}
            self.record({"scenario": "trainer_step", "n": n, "step_s": step, "size_bytes": a.size,
                         "host_gbit": a.gbit, "floor_s": floor}, runs)
        if "elastic" in a.only:
            holders, joiners = pool[:a.elastic_n], pool[a.elastic_n:a.elastic_n + a.elastic_m]
            zeros = [0.0] * len(joiners)
            runs = {"tensorhub": systems.tensorhub(s, meta, trainer, joiners, zeros, holders=holders),
                    "trainer_direct": systems.trainer_direct(s, trainer, joiners, zeros)}
            self.record({"scenario": "elastic_join", "n": a.elastic_n, "m": a.elastic_m, "size_bytes": a.size,
                         "host_gbit": a.gbit, "floor_s": floor}, runs)
        net.teardown()

    def standalone_round(self, s, meta, trainer, readers, offsets, variant):
        """Every system once, one after the other, on the same hosts, each
        after the same quiet gap (SYSTEM_GAP_S)."""
        gap = 0.0 if self.args.smoke else SYSTEM_GAP_S
        time.sleep(gap)
        runs = {"tensorhub": systems.tensorhub(s, meta, trainer, readers, offsets)}
        if self.args.cold_connect and variant == "ready":
            time.sleep(gap)
            runs["tensorhub_cold_connect"] = systems.tensorhub(
                dataclasses.replace(s, connect_ahead=False), meta, trainer, readers, offsets)
        if self.wanted("trainer_direct"):
            time.sleep(gap)
            runs["trainer_direct"] = systems.trainer_direct(s, trainer, readers, offsets)
        if systems.mpi_available(s):
            for name, tuned in (("mpi_default", False), ("mpi_tuned", True)):
                if self.wanted("mpi") or self.wanted(name):
                    time.sleep(gap)
                    self.baseline(runs, name, lambda: systems.mpi_bcast(s, trainer, readers, offsets, tuned))
        if self.wanted("redis") and systems.redis_available(s):
            time.sleep(gap)
            self.baseline(runs, "redis", lambda: systems.redis(s, meta, trainer, readers, offsets))
        return runs

    def baseline(self, runs, name, run):
        """Runs a baseline, once more if it fails (an mpirun daemon that never
        reports, say); a baseline that fails twice is left out of the entry
        and named in the output, rather than losing the whole benchmark. The
        smoke run tries once: it checks that each system runs, and a hung
        mpirun (seen in CI now and then) cost it 30 s a try."""
        tries = 1 if self.args.smoke else 2
        for attempt in range(tries):
            try:
                runs[name] = run()
                return
            except procs.ProcError as e:
                print(f"# {BASELINES[name]} failed (try {attempt + 1} of {tries}): {e.summary()}",
                      flush=True)
                procs.stop_all()
        self.failed.append(name)

    def wanted(self, baseline):
        return baseline in self.args.baselines

    def check_pair(self, run, floor):
        """A single pair must reach the shaped bandwidth, or the emulation
        does not measure what it claims to."""
        ratio = floor / run.makespan_s
        self.pair = {"single_pair_of_floor": ratio, "within_5pct": ratio >= 1 - PAIR_TOLERANCE}
        verdict = "ok" if self.pair["within_5pct"] else "NOT within 5% of B: results are not bandwidth-bound"
        print(f"# single pair (trainer-direct, N=1): {ratio:.1%} of B goodput: {verdict}", flush=True)

    def cross_dc(self):
        a = self.args
        net = netns.Network(self.args.nic_queue_ms)
        self.networks.append(net)
        net.add_dc("dc1")
        net.add_dc("dc2")
        meta = net.add_host("meta", "dc1", a.gbit)
        trainer = net.add_host("trainer", "dc1", a.gbit)
        pool = [net.add_host(f"r{i + 1}", "dc2", a.gbit) for i in range(max(a.ks))]
        wan = a.gbit * a.wan_fraction
        net.join_dcs("dc1", "dc2", wan)
        s = self.setup(net, a.wan_size)
        s.timeout = 120 + 40 * floor_s(a.wan_size, wan) * max(a.ks)
        floor = floor_s(a.wan_size, wan)
        for k in a.ks:
            readers = pool[:k]
            zeros = [0.0] * k
            runs = {"tensorhub": systems.tensorhub(s, meta, trainer, readers, zeros),
                    "trainer_direct": systems.trainer_direct(s, trainer, readers, zeros)}
            self.record({"scenario": "cross_dc", "k": k, "size_bytes": a.wan_size, "host_gbit": a.gbit,
                         "wan_gbit": wan, "floor_s": floor}, runs)
        net.teardown()

    def prefetch(self):
        """Reader stall for the next version, plain fetch against background
        prefetch, for each N and each time U the readers keep using version 1
        after version 2 is published (in units of S/B)."""
        a = self.args
        net, meta, trainer, pool, s = self._one_dc(max(a.ns))
        floor = floor_s(a.size, a.gbit)
        # Version 1 reaches every reader (a chain, plus the trainer's spill)
        # well before version 2 is published.
        interval = 3 * floor + 1.0
        s.timeout += interval
        for n in a.ns:
            readers = pool[:n]
            for use in a.prefetch_uses:
                runs = {name: systems.tensorhub_versions(s, meta, trainer, readers, interval, use * floor, prefetch)
                        for name, prefetch in (("tensorhub", False), ("tensorhub_prefetch", True))}
                plain, pre = runs["tensorhub"], runs["tensorhub_prefetch"]
                entry = {"scenario": "prefetch", "mode": a.mode, "n": n, "use_of_floor": use, "use_s": use * floor,
                         "interval_s": interval, "size_bytes": a.size, "host_gbit": a.gbit, "floor_s": floor,
                         "plain_reader_stall_s": plain.reader_stall_s, "plain_max_stall_s": plain.detail["max_stall_s"],
                         "prefetch_reader_stall_s": pre.reader_stall_s,
                         "prefetch_max_stall_s": pre.detail["max_stall_s"],
                         "prefetch_fetched_max_s": max(pre.detail["fetched_s"]),
                         "plain_s": plain.makespan_s, "prefetch_s": pre.makespan_s,
                         "cpu_busy_max": max(plain.cpu_busy, pre.cpu_busy), "loadavg_1min": os.getloadavg()[0]}
                entry["cpu_bound"] = entry["cpu_busy_max"] >= CPU_BOUND
                entry["verified"] = plain.verified and pre.verified
                self.scenarios.append(entry)
                self.save()
                label = f"prefetch n={n} use={use:g}xS/B"
                for name, run in runs.items():
                    self.rows.append((label, BASELINES.get(name, "tensorhub"), run, floor))
                    print(self._row(*self.rows[-1]), flush=True)
                if not entry["verified"]:
                    raise RuntimeError(f"{label}: a reader holds wrong bytes")
        net.teardown()

    def run(self):
        self.networks = []
        self.pair = None
        self.failed = []
        print(f"tensorhub cluster benchmark: S = {self.args.size >> 20} MiB, B = {self.args.gbit} gbit per host, "
              f"chunk {self.args.chunk_kb} KiB, {self.args.inflight} GETs in flight; "
              f"MPI {'yes' if systems.mpi_available(self.setup(None, 1)) else 'not installed'}, "
              f"Redis {'yes' if systems.redis_available(self.setup(None, 1)) else 'not installed'}", flush=True)
        print(self.header(), flush=True)
        if {"standalone", "standalone_ready", "trainer_step", "elastic"} & self.args.only:
            self.standalone()
        if "cross_dc" in self.args.only:
            self.cross_dc()
        if "prefetch" in self.args.only:
            self.prefetch()
        print(json.dumps(self.save()), flush=True)

    def save(self):
        """The results so far; written to --out after every scenario, so a
        run cut short keeps what it measured."""
        out = {"bench": "cluster", "mode": self.args.mode, "cpus": os.cpu_count(),
               "chunk_kb": self.args.chunk_kb, "inflight": self.args.inflight, "single_pair": self.pair,
               "trainer_step_s": self.args.trainer_step_s, "spill_ahead": self.args.spill_ahead, "stripes": self.args.stripes,
               "scenarios": self.scenarios}
        if self.args.out:
            os.makedirs(os.path.dirname(os.path.abspath(self.args.out)), exist_ok=True)
            with open(self.args.out + ".tmp", "w") as f:
                json.dump(out, f, indent=1)
                f.write("\n")
            os.replace(self.args.out + ".tmp", self.args.out)
        return out

    def cleanup(self):
        procs.stop_all()
        for net in getattr(self, "networks", []):
            net.teardown()
        shutil.rmtree(self.workdir, ignore_errors=True)


def median_runs(rounds):
    """Per system, its run of median makespan over the rounds it completed
    (the lower of the two middle ones for an even count), and every round's
    makespan and trainer stall, for the entry."""
    chosen, spread = {}, {}
    for name in dict.fromkeys(k for r in rounds for k in r):
        runs = sorted((r[name] for r in rounds if name in r), key=lambda run: run.makespan_s)
        chosen[name] = runs[(len(runs) - 1) // 2]
        if len(rounds) > 1:
            spread[f"{name}_s_rounds"] = [round(run.makespan_s, 4) for run in runs]
            spread[f"{name}_trainer_stall_s_rounds"] = [round(run.trainer_stall_s, 4) for run in runs]
    return chosen, spread


def parse():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="tiny sizes, every scenario once (for ctest)")
    p.add_argument("--quick", action="store_true", help="smaller S, N in 1,2,4")
    p.add_argument("--bin-dir", default=os.path.join(REPO, "build", "perf", "cluster"))
    p.add_argument("--server-bin", default=os.path.join(REPO, "build", "tensorhub-server"))
    p.add_argument("--size-mb", type=int)
    p.add_argument("--wan-size-mb", type=int)
    p.add_argument("--gbit", type=float, default=1.0)
    p.add_argument("--wan-fraction", type=float, default=0.1)
    p.add_argument("--ns", help="reader counts, e.g. 1,2,4,8")
    p.add_argument("--ks", help="cross-dc reader counts, e.g. 1,2,4")
    p.add_argument("--elastic", default=None, help="holders,joiners, e.g. 4,4")
    p.add_argument("--only", default="standalone,trainer_step,elastic,cross_dc,prefetch",
                   help="scenarios to run; standalone_ready: standalone without the staggered variant")
    p.add_argument("--prefetch-uses", help="prefetch scenario: how long readers keep using version 1 after "
                   "version 2 is published, in units of S/B, e.g. 0.5,2")
    p.add_argument("--baselines", default="trainer_direct,mpi,redis",
                   help="standalone baselines to run (trainer_direct,mpi,redis; mpi_default or mpi_tuned for one of the two)")
    p.add_argument("--nic-queue-ms", type=int, default=netns.QUEUE_MS,
                   help="how long an emulated NIC queues what waits for its shaper (tbf latency)")
    # A hop of a chain of readers costs one chunk on the link: 256 KiB is
    # 2.2 ms at 1 gbit, the segment the tuned MPI_Bcast pipeline uses
    # (NOTES.md, "A spill answers for its replica; chunks at MPI's segment").
    p.add_argument("--chunk-kb", type=int, default=256)
    p.add_argument("--inflight", type=int, default=16)
    p.add_argument("--trainer-keeps", action="store_true",
                   help="tensorhub's trainer keeps its weights instead of mutating right after publishing")
    p.add_argument("--trainer-step-s", type=float, default=0.0,
                   help="tensorhub's trainer works this long between publishing and mutating (the next step's "
                   "forward and backward); its stall counts only the tensorhub calls")
    p.add_argument("--spill-ahead", action="store_true",
                   help="tensorhub's trainer makes its owned copy right after publishing (th_client_config.spill_ahead)")
    p.add_argument("--cold-connect", action="store_true",
                   help="standalone, all ready: also run tensorhub with TENSORHUB_CONNECT_AHEAD=0 (each fetch makes its "
                   "first UCX connections itself), side by side")
    p.add_argument("--trace", metavar="DIR",
                   help="tensorhub's processes write their event traces under DIR (TENSORHUB_TRACE_DIR, a folder per "
                   "run); each entry then says where its hops' lag went (perf/cluster/hop_profile.py)")
    p.add_argument("--stripes", type=int, default=0,
                   help="tensorhub's server cuts shards into this many stripes (its --stripes; 0: its default, "
                   "chains below 24 workers)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--repeat", type=int, default=1, metavar="K",
                   help="all-ready runs: every system K times, round by round; entries keep the median run "
                        "and every round's figures")
    p.add_argument("--out", help="write the JSON here too (e.g. perf/results/cluster.json)")
    a = p.parse_args()
    a.mode = "smoke" if a.smoke else "quick" if a.quick else "full"
    presets = {"smoke": (8, 4, "2", "1,2", "2,2"), "quick": (64, 16, "1,2,4", "1,2,4", "2,2"),
               "full": (256, 64, "1,2,4,8", "1,2,4", "4,4")}[a.mode]
    size_mb, wan_mb, ns, ks, elastic = presets
    a.size = (a.size_mb or size_mb) << 20
    a.wan_size = (a.wan_size_mb or wan_mb) << 20
    a.ns = [int(x) for x in (a.ns or ns).split(",")]
    a.ks = [int(x) for x in (a.ks or ks).split(",")]
    a.elastic_n, a.elastic_m = (int(x) for x in (a.elastic or elastic).split(","))
    a.only = set(a.only.split(","))
    a.prefetch_uses = [float(x) for x in (a.prefetch_uses or ("2" if a.smoke else "0.5,2")).split(",")]
    a.baselines = set(a.baselines.split(",")) - {""}
    if a.repeat < 1:
        p.error("--repeat must be at least 1")
    if a.smoke:
        a.chunk_kb = min(a.chunk_kb, 256)
        # Tiny sizes arm in a second or two: a launch that hangs (mpirun) is
        # retried sooner, so the smoke run stays within ctest's timeout.
        os.environ.setdefault("TH_CLUSTER_ARM_S", "30")
    return a


def main():
    a = parse()
    if not netns.available():
        print("cluster benchmark skipped: needs root and `ip netns` (network namespaces)")
        return SKIP
    for prog in ("tensorhub-cluster-node",):
        if not os.access(os.path.join(a.bin_dir, prog), os.X_OK):
            print(f"cluster benchmark: {prog} not found in {a.bin_dir} (build target tensorhub-cluster-bench)",
                  file=sys.stderr)
            return 2
    netns.clean_stale()
    bench = Bench(a)
    atexit.register(bench.cleanup)

    def on_signal(signum, _frame):
        raise SystemExit(128 + signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    try:
        bench.run()
    except (procs.ProcError, RuntimeError) as e:
        print(f"cluster benchmark failed: {e}", file=sys.stderr)
        return 1
    finally:
        bench.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
