"""A reader cut off from one holder, end to end: four hosts in network
namespaces (server, trainer, r1, r2), and the path between the trainer and
r1 broken while every other path works. The trainer publishes a 16 MiB
version every second; r1 and r2, like rollout workers, fetch each newer
version, check every byte and serve what they hold (worker.py).

  refused  the path refuses at once (blackhole routes: connecting fails)
  silent   what is sent on it vanishes (neighbour entries pointing at a MAC
           address nobody has): r1 finds out when its reads time out

Checks, until the readers are told to stop: r2, whose paths all work,
never fails a fetch; r1 gets every version it asks for from r2 instead;
nothing reads a wrong byte; the trainer, which still talks to the server,
is never taken out of service (told to register again). Before
(server/reachability.hpp) one reader's report took the trainer out for
everybody, and both readers failed fetches. Exits 77 (skipped) without root
or iproute2.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "perf", "cluster"))
import netns  # noqa: E402
import verdict  # noqa: E402

SKIP = verdict.SKIP
SECONDS = 20
SHARD_BYTES = 16 << 20


def cut(net_prefix, hosts, a, b, how):
    """Breaks the path between hosts a and b, both ways."""
    for x, y in ((a, b), (b, a)):
        if how == "refused":
            cmd = ["ip", "route", "add", "blackhole", f"{hosts[y].ip}/32"]
        else:
            cmd = ["ip", "neigh", "replace", hosts[y].ip, "lladdr", "02:00:00:00:00:99", "dev", "eth0", "nud", "permanent"]
        subprocess.run(net_prefix[x] + cmd, check=True)


def ops(path):
    return [json.loads(line) for line in open(path) if line.startswith("{")]


def run(args, tmp):
    netns.clean_stale()
    net = netns.Network()
    procs = []
    try:
        net.add_dc("dc")
        hosts = {n: net.add_host(n, "dc", 10.0) for n in ("server", "trainer", "r1", "r2")}
        prefix = {n: net.exec_prefix(h) for n, h in hosts.items()}
        env = dict(os.environ, UCX_TLS="tcp", UCX_NET_DEVICES="eth0", UCX_WARN_UNUSED_ENV_VARS="n",
                   TENSORHUB_LOG_LEVEL="info", PYTHONUNBUFFERED="1",
                   TENSORHUB_LIB=os.path.join(args.build, "libtensorhub.so"),
                   PYTHONPATH=os.path.join(ROOT, "bindings", "python"))
        url = f"tcp://{hosts['server'].ip}:7070"

        def start(host, argv, name):
            p = subprocess.Popen(prefix[host] + argv, stdout=open(os.path.join(tmp, name + ".log"), "w"),
                                 stderr=subprocess.STDOUT, env=env, start_new_session=True)
            procs.append(p)

        start("server", [os.path.join(args.build, "tensorhub-server"), "--listen", url], "server")
        cut(prefix, hosts, "trainer", "r1", args.how)
        # Readers stop first: a fetch under way when the trainer leaves fails.
        stop = {role: os.path.join(tmp, "stop-" + role) for role in ("publish", "read")}
        worker = [sys.executable, os.path.join(HERE, "worker.py"), "--url", url, "--bytes", str(SHARD_BYTES),
                  "--seconds", str(SECONDS + 30)]
        start("trainer", worker + ["--role", "publish", "--name", "trainer", "--period", "1.0",
                                   "--stop", stop["publish"]], "trainer")
        for r in ("r1", "r2"):
            start(r, worker + ["--role", "read", "--name", r, "--period", "0.1", "--serve", "--newer",
                               "--stop", stop["read"]], r)
        time.sleep(SECONDS)
        stopped = time.time()  # a fetch that ends later may have lost the other reader to the stop
        for role, which in (("read", procs[2:]), ("publish", procs[1:2])):
            open(stop[role], "w").close()
            deadline = time.time() + 30
            while time.time() < deadline and any(p.poll() is None for p in which):
                time.sleep(0.2)
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        net.teardown()

    problems = []
    report = {"how": args.how}
    for r in ("r1", "r2"):
        fetches = [o for o in ops(os.path.join(tmp, r + ".log")) if o["op"] == "fetch" and o["end"] < stopped]
        ok = [o for o in fetches if o.get("ok")]
        report[r] = {"fetches": len(fetches), "ok": len(ok),
                     "slowest_s": round(max((o["end"] - o["start"] for o in ok), default=0), 3)}
        for o in fetches:
            if o.get("corrupt"):
                problems.append(f"{r} read wrong bytes of version {o.get('version')}")
            elif not o.get("ok"):
                problems.append(f"{r}: a fetch failed: {o.get('error')}")
        # r1 waits out a read timeout each time it tries the trainer again
        # over a silent path (its avoidance doubles each time).
        least = 2 if r == "r1" and args.how == "silent" else 5
        if len(ok) < least:
            problems.append(f"{r} fetched only {len(ok)} versions in {SECONDS} s")
    published = [o for o in ops(os.path.join(tmp, "trainer.log")) if o["op"] == "publish" and o.get("ok")]
    report["published"] = len(published)
    server_log = open(os.path.join(tmp, "server.log")).read()
    report["reported"] = server_log.count("could not read from worker")
    if report["reported"] == 0:
        problems.append("r1 never reported the trainer: was the path cut?")
    for line in server_log.splitlines():
        if "'trainer'" in line and "not routed to until it registers again" in line:
            problems.append("the trainer was taken out of service: " + line)
    if server_log.count("'trainer' registered") != 1:
        problems.append("the trainer had to register again")
    return problems, report


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", required=True, help="the build folder (tensorhub-server, libtensorhub.so)")
    p.add_argument("how", choices=("refused", "silent"))
    args = p.parse_args()
    if not netns.available():
        print("skipped: network namespaces need root and iproute2")
        return SKIP
    return verdict.run_in_tmp("th-partition-", lambda tmp: run(args, tmp))


if __name__ == "__main__":
    sys.exit(main())
