"""Metadata-server HA on etcd, end to end: a real etcd, tensorhub-server
processes started with --etcd, and worker processes (worker.py) that follow
the leader through server_url etcd://... while a publisher keeps publishing
and readers keep fetching and checking every byte.

  kill       SIGKILL the leader while transfers are in flight (one host).
  stop       SIGTERM the leader while transfers are in flight: it resigns
             in etcd as it shuts down (a rolling upgrade; one host).
  partition  cut the leader off from etcd and from half of the workers with
             blackhole routes between network namespaces, then heal.

Checks, both scenarios: leadership terms (from the servers' logs) never
overlap, so no client can be served by two leaders; no fetch fails and none
reads a wrong byte; every worker succeeds again within a stated bound of the
fault (REREGISTER_BOUND_S); the publisher keeps committing new versions.
Exits 77 (skipped) without etcd, or for `partition` without root.
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "perf", "cluster"))
import netns  # noqa: E402
import verdict  # noqa: E402

SKIP = verdict.SKIP
ETCD_LEASE_MS = 3000
CLIENT_TIMEOUT_S = 10.0
FETCH_DEADLINE_S = CLIENT_TIMEOUT_S * 6  # a whole fetch (th_fetch_config.timeout_ms 0)
HEARTBEAT_S = 1.0
# etcd names the next leader within the lease and a quarter of a dead or
# cut-off one; a worker's call (a heartbeat at the latest) that has waited on
# the old leader for 0.5 s has etcd read every 0.25 s, and the worker moves
# to the one etcd names and registers there. With room for a loaded machine:
LEADER_CHECK_S = 0.5 + 0.25
REREGISTER_BOUND_S = HEARTBEAT_S + LEADER_CHECK_S + ETCD_LEASE_MS / 1000 * 1.25 + 5.0
PREFIX = "/tensorhub"


class Host:
    """Where processes run: this namespace (prefix []) or a netns host."""

    def __init__(self, name, ip, prefix):
        self.name, self.ip, self.prefix = name, ip, prefix


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self, build, tmp, hosts, worker_env):
        self.build, self.tmp, self.hosts, self.worker_env = build, tmp, hosts, worker_env
        self.procs = []
        self.servers = {}  # name -> (proc, url, log path)
        self.workers = {}  # name -> (proc, out path)

    def start(self, host, args, log, env=None):
        p = subprocess.Popen(host.prefix + args, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                             env=dict(os.environ, **(env or {})), start_new_session=True)
        self.procs.append(p)
        return p

    def start_etcd(self, host):
        cport, pport = 23790 + os.getpid() % 1000, 24790 + os.getpid() % 1000
        if host.ip == "127.0.0.1":
            cport, pport = free_port(), free_port()
        peer = f"http://{host.ip}:{pport}"
        self.etcd_endpoint = f"{host.ip}:{cport}"
        self.etcd_host = host
        self.start(host, ["etcd", "--name", "t", "--data-dir", os.path.join(self.tmp, "etcd"),
                          "--listen-client-urls", f"http://{host.ip}:{cport}",
                          "--advertise-client-urls", f"http://{host.ip}:{cport}",
                          "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                          "--initial-cluster", f"t={peer}"], os.path.join(self.tmp, "etcd.log"))
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.etcd_get(PREFIX + "/none") is not False:
                return
            time.sleep(0.2)
        raise SystemExit("etcd did not start: " + open(os.path.join(self.tmp, "etcd.log")).read()[-2000:])

    def etcd_get(self, key):
        """The value at key (None if absent), or False if etcd cannot be asked.
        Asked from etcd's own host: the test's namespace may not reach it."""
        code = ("import base64,json,sys,urllib.request as u\n"
                f"r=u.Request('http://{self.etcd_endpoint}/v3/kv/range',"
                f"data=json.dumps({{'key':base64.b64encode({key!r}.encode()).decode()}}).encode())\n"
                "kvs=json.load(u.urlopen(r,timeout=2)).get('kvs')\n"
                "print(base64.b64decode(kvs[0].get('value','')).decode() if kvs else '')")
        r = subprocess.run(self.etcd_host.prefix + [sys.executable, "-c", code], capture_output=True, text=True)
        if r.returncode != 0:
            return False
        return r.stdout.strip() or None

    def leader(self):
        value = self.etcd_get(PREFIX + "/leader")
        return json.loads(value)["url"] if value else None

    def start_server(self, name, host):
        url = f"tcp://{host.ip}:{free_port() if host.ip == '127.0.0.1' else 7070}"
        log = os.path.join(self.tmp, f"{name}.log")
        p = self.start(host, [os.path.join(self.build, "tensorhub-server"), "--listen", url,
                              "--etcd", self.etcd_endpoint, "--etcd-lease-ms", str(ETCD_LEASE_MS)],
                       log, {"TENSORHUB_LOG_LEVEL": "info"})
        self.servers[name] = (p, url, log)
        return url

    def wait_for_leader(self, url=None, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            leader = self.leader()
            if leader and (url is None or leader == url):
                return leader
            time.sleep(0.1)
        raise SystemExit(f"no leader{' ' + url if url else ''} in etcd after {timeout} s")

    def start_worker(self, name, host, role):
        out = os.path.join(self.tmp, f"{name}.jsonl")
        p = self.start(host, [sys.executable, os.path.join(HERE, "worker.py"), "--url",
                              f"etcd://{self.etcd_endpoint}{PREFIX}", "--role", role, "--name", name,
                              "--stop", os.path.join(self.tmp, f"stop-{role}"), "--timeout", str(CLIENT_TIMEOUT_S)],
                       out, self.worker_env)
        self.workers[name] = (p, out)

    def done(self, name, after=0.0):
        """The worker's successful publishes and fetches that ended after `after`."""
        recs = [json.loads(line) for line in open(self.workers[name][1]) if line.startswith("{")]
        return [r for r in recs if r["ok"] and r["op"] in ("publish", "fetch") and r["end"] > after]

    def wait_for_ops(self, n, after, timeout, why):
        """Until every worker did n operations after `after` (a slow machine
        takes its time starting Python workers: the test waits, not guesses)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if all(len(self.done(w, after)) >= n for w in self.workers):
                return
            for w, (p, out) in self.workers.items():
                if p.poll() is not None:
                    raise SystemExit(f"worker {w} exited {why}: " + open(out).read()[-2000:])
            time.sleep(0.2)
        counts = {w: len(self.done(w, after)) for w in self.workers}
        print(f"workers did not all do {n} operations {why} within {timeout} s: {counts}")

    def finish_workers(self, timeout):
        """Readers first, then the publisher: a reader whose source leaves
        mid-fetch would fail for a reason that is not this test's."""
        self.stopped_at = time.time()
        for role in ("read", "publish"):
            open(os.path.join(self.tmp, f"stop-{role}"), "w").close()
            for name, (p, out) in self.workers.items():
                if (name == "pub") != (role == "publish"):
                    continue
                try:
                    p.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    stacks = subprocess.run(["gdb", "-p", str(p.pid), "-batch", "-ex", "thread apply all bt"],
                                            capture_output=True, text=True).stdout if shutil.which("gdb") else ""
                    p.kill()
                    raise SystemExit(f"worker {name} hung; its output:\n" + open(out).read()[-6000:] +
                                     "\nits threads:\n" + stacks[-8000:])

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()


def terms(log, killed_at=None, ended_at=None):
    """A server's leadership terms [(start, end)] in wall-clock seconds, from
    its log; an open term ends when it was killed, or at the end of the run."""
    out, start = [], None
    for line in open(log):
        m = re.search(r"term (starts|ends) at (\d+) ms", line)
        if not m:
            continue
        t = int(m.group(2)) / 1000
        if m.group(1) == "starts":
            start = t
        elif start is not None:
            out.append((start, t))
            start = None
    if start is not None:
        out.append((start, killed_at or ended_at))
    return out


def check(cluster, fault_at, killed=None):
    problems, report = [], {}
    # 1. Terms never overlap.
    all_terms = []
    for name, (_, url, log) in cluster.servers.items():
        for t in terms(log, killed_at=fault_at if name == killed else None, ended_at=time.time()):
            all_terms.append((t[0], t[1], name))
    all_terms.sort()
    report["terms"] = [(n, round(a - fault_at, 3), round(b - fault_at, 3)) for a, b, n in all_terms]
    for (a1, b1, n1), (a2, b2, n2) in zip(all_terms, all_terms[1:]):
        if a2 < b1:
            problems.append(f"{n2}'s term starts {b1 - a2:.3f} s before {n1}'s ends")
    if len(all_terms) < 2:
        problems.append(f"no new leader after the fault: terms {report['terms']}")
    # 2. Every operation succeeded, no byte was wrong, every worker came back.
    for name, (p, out) in cluster.workers.items():
        recs = [json.loads(line) for line in open(out) if line.startswith("{")]
        if p.returncode != 0:
            problems.append(f"worker {name} exited with {p.returncode}: " + open(out).read()[-1500:])
        # Failures before the fault are not this test's subject (the first
        # connection between two workers can still be reset; see the notes).
        failed = [r for r in recs if not r["ok"] and r["end"] > fault_at]
        early = [r for r in recs if not r["ok"] and r["end"] <= fault_at]
        if early:
            print(f"note: worker {name}: {len(early)} failed before the fault, first: {early[0]}")
        corrupt = [r for r in recs if r.get("corrupt")]
        if failed:
            problems.append(f"worker {name}: {len(failed)} failed, first: {failed[0]}")
        if corrupt:
            problems.append(f"worker {name}: {len(corrupt)} corrupt reads")
        done = [r for r in recs if r["ok"] and r["op"] in ("publish", "fetch")]
        after = [r["end"] - fault_at for r in done if r["end"] > fault_at]
        before = [r for r in done if r["end"] <= fault_at]
        if not before or not after:
            problems.append(f"worker {name}: {len(before)} operations before the fault, {len(after)} after")
            continue
        report[name] = {"ops": len(done), "back_after_s": round(min(after), 3)}
        if min(after) > REREGISTER_BOUND_S:
            problems.append(f"worker {name} succeeded again only {min(after):.1f} s after the fault "
                            f"(bound {REREGISTER_BOUND_S:.1f} s)")
        versions = [r["version"] for r in done]
        report[name]["versions"] = [min(versions), max(versions)]
    pubs = [r for r in (json.loads(line) for line in open(cluster.workers["pub"][1]) if line.startswith("{"))
            if r["op"] == "publish" and r["ok"] and r["start"] > fault_at]
    if len(pubs) < 3:
        problems.append(f"the publisher committed only {len(pubs)} versions after the fault")
    return problems, report


def scenario_kill(args, tmp, sig=signal.SIGKILL):
    here = Host("local", "127.0.0.1", [])
    c = Cluster(args.build, tmp, [here], {"TENSORHUB_LOG_LEVEL": os.environ.get("TH_WORKER_LOG", "info")})
    try:
        c.start_etcd(here)
        first = c.start_server("s1", here)
        c.wait_for_leader(first)
        c.start_server("s2", here)
        c.start_worker("pub", here, "publish")
        for i in range(3):
            c.start_worker(f"r{i}", here, "read")
        c.wait_for_ops(3, 0, 120, "before the fault")
        fault_at = time.time()
        os.killpg(c.servers["s1"][0].pid, sig)
        print(f"sent {sig.name} to the leader {first} with transfers in flight", flush=True)
        c.wait_for_ops(5, fault_at, REREGISTER_BOUND_S + 30, "after the fault")
        c.finish_workers(timeout=FETCH_DEADLINE_S + 30)
        # A stopped leader logs the end of its term as it resigns.
        return check(c, fault_at, killed="s1" if sig == signal.SIGKILL else None)
    finally:
        c.stop()


def scenario_partition(args, tmp):
    if not netns.available():
        print("skipped: network namespaces need root and iproute2")
        return None
    netns.clean_stale()
    net = netns.Network()
    try:
        net.add_dc("dc")
        hosts = {}
        for name in ("etcd", "s1", "s2", "c1", "c2", "c3", "c4"):
            h = net.add_host(name, "dc", 1.0)
            hosts[name] = Host(name, h.ip, net.exec_prefix(h))
        env = {"UCX_TLS": "tcp", "UCX_NET_DEVICES": "eth0", "UCX_WARN_UNUSED_ENV_VARS": "n",
               "TENSORHUB_LOG_LEVEL": os.environ.get("TH_WORKER_LOG", "info")}
        c = Cluster(args.build, tmp, hosts, env)
        try:
            c.start_etcd(hosts["etcd"])
            first = c.start_server("s1", hosts["s1"])
            c.wait_for_leader(first)
            c.start_server("s2", hosts["s2"])
            c.start_worker("pub", hosts["c1"], "publish")
            for i, h in enumerate(("c2", "c3", "c4")):
                c.start_worker(f"r{i}", hosts[h], "read")
            c.wait_for_ops(3, 0, 120, "before the fault")
            # s1 loses etcd and half the workers (the publisher's host among
            # them); the other half still reach it.
            cut = ["etcd", "c1", "c2"]
            fault_at = time.time()
            for other in cut:
                subprocess.run(hosts["s1"].prefix + ["ip", "route", "add", "blackhole", f"{hosts[other].ip}/32"],
                               check=True)
                subprocess.run(hosts[other].prefix + ["ip", "route", "add", "blackhole", f"{hosts['s1'].ip}/32"],
                               check=True)
            print(f"cut {first} off from {', '.join(cut)}", flush=True)
            c.wait_for_ops(5, fault_at, REREGISTER_BOUND_S + 30, "after the fault")
            time.sleep(max(0.0, fault_at + 9 - time.time()))
            for other in cut:
                subprocess.run(hosts["s1"].prefix + ["ip", "route", "del", "blackhole", f"{hosts[other].ip}/32"],
                               check=True)
                subprocess.run(hosts[other].prefix + ["ip", "route", "del", "blackhole", f"{hosts['s1'].ip}/32"],
                               check=True)
            print("healed the partition", flush=True)
            c.wait_for_ops(3, time.time(), 60, "after the partition healed")
            c.finish_workers(timeout=FETCH_DEADLINE_S + 30)
            problems, report = check(c, fault_at)
            # Healed, the old leader stays a follower: one term only.
            if len(terms(c.servers["s1"][2], ended_at=time.time())) != 1:
                problems.append("the cut-off leader led again after the partition healed")
            return problems, report
        finally:
            c.stop()
    finally:
        net.teardown()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", required=True, help="the build folder (tensorhub-server, libtensorhub.so)")
    p.add_argument("scenario", choices=("kill", "stop", "partition"))
    args = p.parse_args()
    if shutil.which("etcd") is None:
        print("skipped: no etcd (Debian: apt-get install etcd-server)")
        return SKIP
    os.environ["TENSORHUB_LIB"] = os.path.join(args.build, "libtensorhub.so")
    os.environ["PYTHONPATH"] = os.path.join(ROOT, "bindings", "python")

    def body(tmp):
        if args.scenario == "partition":
            return scenario_partition(args, tmp)
        return scenario_kill(args, tmp, signal.SIGKILL if args.scenario == "kill" else signal.SIGTERM)

    return verdict.run_in_tmp("th-etcd-", body, show_log=lambda name: not name.startswith("etcd"))


if __name__ == "__main__":
    sys.exit(main())
