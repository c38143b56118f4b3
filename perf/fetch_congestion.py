#!/usr/bin/env python3
"""The fetch benchmark's tcp lane under each tcp congestion control, alternated.

On one host the tcp lane's figures follow the kernel's congestion control
(perf/FETCH.md, "The tcp lane and the host's congestion control"). This runs
tensorhub-fetch-bench --lanes tcp once per control and round, each run in a
network namespace of its own set to that control, so the host's own setting
is left alone, and prints a row per run and the range per control.

  perf/fetch_congestion.py [--bench PATH] [--controls cubic,bbr] [--rounds 3] [--out FILE] [-- BENCH ARGS]

Bench args default to --sizes-mb 1024 --reps 5. Needs root (namespaces) and
iproute2. Exits 77 when it cannot run here (not root, no unshare).
"""

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AVAILABLE = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")

COLUMNS = [("fetch_gbps", "tensorhub GB/s"), ("raw_gbps", "raw GB/s"), ("ratio", "ratio"),
           ("raw_chunk_read_gbps", "raw GET GB/s"), ("raw_pull_gbps", "raw pull GB/s"),
           ("ratio_paired", "paired"), ("holder_cpu_s_per_gib", "holder CPU s/GiB"),
           ("raw_target_cpu_s_per_gib", "raw target CPU s/GiB"), ("reader_cpu_s_per_gib", "reader CPU s/GiB")]


def available() -> set[str]:
    return set(AVAILABLE.read_text().split()) if AVAILABLE.exists() else set()


def make_available(control: str) -> None:
    if control in available():
        return
    subprocess.run(["modprobe", f"tcp_{control}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    if control not in available():
        sys.exit(f"fetch_congestion.py: the kernel offers no tcp congestion control '{control}' "
                 f"(available: {' '.join(sorted(available())) or 'none'}; modprobe tcp_{control} failed)")


def run_once(bench: str, control: str, args: list[str]) -> dict:
    """One benchmark run in a fresh network namespace set to control; its JSON line."""
    inner = (f"ip link set lo up && printf %s {shlex.quote(control)} > /proc/sys/net/ipv4/tcp_congestion_control && "
             f"exec {shlex.quote(bench)} --lanes tcp {' '.join(shlex.quote(a) for a in args)}")
    proc = subprocess.run(["unshare", "--net", "sh", "-c", inner], capture_output=True, text=True, check=False)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
    if proc.returncode != 0 or not lines:
        sys.exit(f"fetch_congestion.py: the benchmark under {control} failed (exit {proc.returncode}):\n"
                 f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    result = json.loads(lines[-1])
    if result.get("tcp_congestion_control") != control:
        sys.exit(f"fetch_congestion.py: the benchmark ran under '{result.get('tcp_congestion_control')}', "
                 f"not '{control}'")
    return result


def main() -> int:
    argv = sys.argv[1:]
    bench_args = ["--sizes-mb", "1024", "--reps", "5"]
    if "--" in argv:
        bench_args = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bench", default=str(ROOT / "build/perf/tensorhub-fetch-bench"))
    p.add_argument("--controls", default="cubic,bbr")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", help="also write every run's JSON line, in the order run, to this file")
    o = p.parse_args(argv)
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None:
        print("fetch_congestion.py: needs root, unshare and ip (iproute2): skipped", file=sys.stderr)
        return 77
    if not Path(o.bench).exists():
        sys.exit(f"fetch_congestion.py: no benchmark at {o.bench} (build the tensorhub-fetch-bench target)")
    controls = [c for c in o.controls.split(",") if c]
    for c in controls:
        make_available(c)

    print(f"tcp lane, {' '.join(bench_args)}; controls alternated, {o.rounds} round(s), a network namespace per run")
    print(f"{'control':8} {'round':>5} " + " ".join(f"{title:>{len(title)}}" for _, title in COLUMNS), flush=True)
    runs: dict[str, list[dict]] = {c: [] for c in controls}
    in_order = []
    for rnd in range(1, o.rounds + 1):
        for c in controls:
            r = run_once(o.bench, c, bench_args)
            runs[c].append(r)
            in_order.append(r)
            print(f"{c:8} {rnd:>5} " + " ".join(f"{r[key]:>{len(title)}.3f}" for key, title in COLUMNS), flush=True)
    if o.out:
        Path(o.out).write_text(json.dumps({"bench": "fetch_congestion", "args": bench_args, "runs": in_order}, indent=1) + "\n")
    print()
    for c in controls:
        spans = ", ".join(f"{title} {min(r[k] for r in runs[c]):.2f}-{max(r[k] for r in runs[c]):.2f}"
                          for k, title in COLUMNS[:3])
        print(f"{c}: {spans}")
    print(json.dumps({"bench": "fetch_congestion", "runs": {c: [{k: r[k] for k, _ in COLUMNS} for r in runs[c]]
                                                            for c in controls}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
