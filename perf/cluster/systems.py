"""One timed run of each system that moves the trainer's S bytes to readers
inside the emulated cluster: tensorhub, trainer-direct (plain UCX GETs from
the trainer), MPI_Bcast (Open MPI, default or tuned pipelined algorithm) and
Redis (push then pull). Each returns a Run with the same figures:

  makespan_s      start (T0) to the last reader holding the bytes
  reader_stall_s  sum over readers of (holding the bytes - ready)
  trainer_stall_s how long the trainer is blocked before it may change its
                  weights, counted from T0 (see perf/RESULTS.md)
  cpu_busy        busy fraction of all CPUs during the timed part
  verified        every reader's bytes checked against the pattern
"""

import dataclasses
import os
import shlex
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field

from procs import CpuMeter, Proc, ProcError


@dataclass
class Run:
    makespan_s: float
    reader_stall_s: float
    trainer_stall_s: float
    cpu_busy: float
    verified: bool
    detail: dict = field(default_factory=dict)


@dataclass
class Setup:
    net: object
    bin_dir: str
    server_bin: str
    workdir: str
    size: int
    tensors: int = 4
    chunk_kb: int = 1024
    inflight: int = 8
    redis_chunk_mb: int = 8
    timeout: float = 300.0
    trainer_keeps: bool = False  # tensorhub's trainer does not mutate after publishing
    trainer_step_s: float = 0.0  # its forward and backward between publish and mutation
    spill_ahead: bool = False    # th_client_config.spill_ahead for tensorhub's trainer
    connect_ahead: bool = True   # False: TENSORHUB_CONNECT_AHEAD=0 (first connections made by the fetch)
    trace_dir: str = ""          # TENSORHUB_TRACE_DIR for tensorhub's processes (a folder per run under it)
    stripes: int = 0             # the server's --stripes (0: its default)

    def env(self):
        e = dict(os.environ)
        # Across namespaces UCX's defaults take the hosts for one and pick
        # shared memory: force tcp over the namespace's NIC.
        e.update(UCX_TLS="tcp", UCX_NET_DEVICES="eth0", UCX_WARN_UNUSED_ENV_VARS="n",
                 OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        # Every program here loads UCX as it starts, before it has threads:
        # UCX >= 1.21 need not spin 0.4 s patching libc (README, "Building by
        # hand"). Before T0, so no figure contains it either way.
        e.setdefault("UCX_MEM_BISTRO_GRACE_DURATION", "0")
        if not self.connect_ahead:
            e["TENSORHUB_CONNECT_AHEAD"] = "0"
        if self.trace_dir:
            e["TENSORHUB_TRACE_DIR"] = self.trace_dir
        return e

    def start(self, name, host, argv, hostname=False):
        return Proc(f"{name} on {host.name}", self.net.exec_prefix(host, hostname) + argv, env=self.env())

    def program(self, name):
        return os.path.join(self.bin_dir, name)

    def has(self, name):
        return os.access(self.program(name), os.X_OK)


ARM_TIMEOUT = 120.0  # setting up (launching, filling S bytes) takes seconds, not minutes


def _arm_and_start(procs, timeout, delay=0.3):
    """Waits until every process is armed, gives them all the same T0 and
    returns it once it has come."""
    for p in procs:
        p.expect_json("event", "armed", min(timeout, ARM_TIMEOUT, float(os.environ.get("TH_CLUSTER_ARM_S", ARM_TIMEOUT))))
    t0 = time.time() + delay
    for p in procs:
        p.send(f"start {t0:.6f}")
    time.sleep(max(0.0, t0 - time.time()))
    return t0


def _collect(procs, key, value, timeout):
    deadline = time.monotonic() + timeout
    return [p.expect_json(key, value, deadline - time.monotonic()) for p in procs]


def _verify(procs, timeout):
    for p in procs:
        p.send("verify")
    return all(p.expect_json("verified", None, timeout)["verified"] for p in procs)


def _stalls(results, t0):
    return (max(r["done"] for r in results) - t0, sum(r["done"] - r["ready"] for r in results))


def _finish(procs):
    for p in procs:
        p.finish()


# ---------------------------------------------------------------------------

def _trainer_flags(s):
    return ((["--keep"] if s.trainer_keeps else []) + (["--spill-ahead"] if s.spill_ahead else [])
            + (["--step-s", f"{s.trainer_step_s:.6f}"] if s.trainer_step_s > 0 else []))


def _tensorhub_server(s, meta, started):
    """Starts the metadata server on meta (first in `started`, which the
    caller stops) and waits until it listens."""
    server = s.start("tensorhub-server", meta, [s.server_bin, "--listen", f"tcp://{meta.ip}:7070"]
                     + (["--stripes", str(s.stripes)] if s.stripes else []))
    started.append(server)
    server.expect(lambda o: isinstance(o, str) and o.startswith("listening on"), 30)


def tensorhub(s, meta, trainer, readers, offsets, holders=(), mutation_wait_ms=0):
    """The trainer publishes at T0 and at once begins to mutate. With holders,
    they fetch first (untimed) and `readers` join at T1, after the holders
    are done; the figures are then counted from T1."""
    started = []
    if s.trace_dir:
        os.makedirs(s.trace_dir, exist_ok=True)
        s = dataclasses.replace(s, trace_dir=tempfile.mkdtemp(prefix="run-", dir=s.trace_dir))
    try:
        _tensorhub_server(s, meta, started)
        url = f"tcp://{meta.ip}:7070"
        common = [s.program("tensorhub-cluster-node"), "--bytes", str(s.size), "--tensors", str(s.tensors),
                  "--chunk-kb", str(s.chunk_kb), "--inflight", str(s.inflight), "--server", url]

        def node(role, host, extra=()):
            p = s.start(role, host, common + ["--role", role, "--labels", f"host={host.name},dc={host.dc}", *extra])
            started.append(p)
            return p

        tr = node("trainer", trainer, ["--mutation-wait-ms", str(mutation_wait_ms)] + _trainer_flags(s))
        first = [node("reader", h) for h in holders]
        joiners = [node("reader", h, ["--ready-offset", f"{d:.6f}"]) for h, d in zip(readers, offsets)]
        cpu = CpuMeter()
        if holders:
            for p in joiners:
                p.expect_json("event", "armed", s.timeout)
            _arm_and_start([tr] + first, s.timeout)
            trainer_result = tr.expect_json("role", "trainer", s.timeout)
            _collect(first, "role", "reader", s.timeout)
            t0 = time.time() + 0.3
            for p in joiners:
                p.send(f"start {t0:.6f}")
            time.sleep(max(0.0, t0 - time.time()))
            cpu.start()
        else:
            t0 = _arm_and_start([tr] + joiners, s.timeout)
            cpu.start()
            trainer_result = tr.expect_json("role", "trainer", s.timeout)
        results = _collect(joiners, "role", "reader", s.timeout)
        busy = cpu.stop()
        makespan, stall = _stalls(results, t0)
        ok = _verify(first + joiners, s.timeout)
        # What the trainer waited for in tensorhub calls (publish and
        # begin-mutation), not its own step between them.
        trainer_stall = 0.0 if holders else trainer_result["stall_s"]
        # When each reader held the bytes, in order: in a chain of ready
        # readers the gaps between them are the per-hop lag.
        # Each reader's fetch, in the order they held the bytes.
        fetches = [{"done_s": r["done"] - t0, "sources": r.get("sources"), "replans": r.get("replans"),
                    "from_publisher_mib": r.get("from_publisher", 0) >> 20}
                   for r in sorted(results, key=lambda r: r["done"])]
        detail = {"mutation_s": trainer_result["stall_s"], "done_s": [f["done_s"] for f in fetches], "fetches": fetches}
        if not holders:
            detail["publish_s"] = trainer_result["published"] - t0
        if s.trace_dir:
            detail["trace_dir"] = s.trace_dir  # read once the processes are gone (cluster.py)
        return Run(makespan, stall, trainer_stall, busy, ok, detail)
    finally:
        _finish([p for p in started if p is not started[0]])
        if started:
            started[0].kill(signal.SIGTERM)


def tensorhub_versions(s, meta, trainer, readers, interval_s, use_s, prefetch):
    """Two versions: the trainer publishes version 1 at T0 (and mutates, as
    in tensorhub()), version 2 at T1 = T0 + interval_s. Every reader fetches
    version 1 at T0, uses it until T1 + use_s, and then wants version 2: it
    fetches it then (plain), or swaps in the copy a background thread fetched
    into spare buffers since T1 (prefetch). Figures count from T1; a reader's
    stall is from wanting version 2 to holding it in its live buffers."""
    started = []
    try:
        _tensorhub_server(s, meta, started)
        common = [s.program("tensorhub-cluster-node"), "--bytes", str(s.size), "--tensors", str(s.tensors),
                  "--chunk-kb", str(s.chunk_kb), "--inflight", str(s.inflight), "--server", f"tcp://{meta.ip}:7070",
                  "--versions", "2", "--interval-s", f"{interval_s:.6f}"]

        def node(role, host, extra=()):
            p = s.start(role, host, common + ["--role", role, "--labels", f"host={host.name},dc={host.dc}", *extra])
            started.append(p)
            return p

        tr = node("trainer", trainer, ["--mutation-wait-ms", "0"] + _trainer_flags(s))
        rs = [node("reader", h, ["--use-s", f"{use_s:.6f}"] + (["--prefetch"] if prefetch else [])) for h in readers]
        t0 = _arm_and_start([tr] + rs, s.timeout)
        deadline = time.monotonic() + s.timeout + interval_s + use_s
        for p in rs:
            p.expect_json("step", 1, deadline - time.monotonic())
        second = tr.expect_json("step", 2, deadline - time.monotonic())
        cpu = CpuMeter()
        cpu.start()
        results = [p.expect_json("step", 2, deadline - time.monotonic()) for p in rs]
        busy = cpu.stop()
        t1 = t0 + interval_s
        ok = _verify(rs, s.timeout)
        stalls = [r["done"] - r["ready"] for r in results]
        detail = {"stalls_s": stalls, "max_stall_s": max(stalls), "publish_s": second["published"] - t1,
                  "wanted_at_s": use_s}
        if prefetch:
            # When the background fetches had the version, from T1.
            detail["fetched_s"] = [r["fetched"] - t1 for r in results]
        return Run(max(r["done"] for r in results) - t1, sum(stalls), second["free"] - t1, busy, ok, detail)
    finally:
        _finish([p for p in started if p is not started[0]])
        if started:
            started[0].kill(signal.SIGTERM)


def trainer_direct(s, trainer, readers, offsets):
    """Every reader GETs the whole buffer from the trainer over UCX; the
    trainer may change its weights once the last reader is done."""
    started = []
    info = os.path.join(s.workdir, "direct-target.info")
    if os.path.exists(info):
        os.remove(info)
    try:
        common = ["--bytes", str(s.size), "--tensors", str(s.tensors), "--chunk-kb", str(s.chunk_kb),
                  "--inflight", str(s.inflight), "--info", info]
        node = s.program("tensorhub-cluster-node")
        target = s.start("direct-target", trainer, [node, "--role", "direct-target", *common])
        started.append(target)
        target.expect_json("event", "armed", s.timeout)
        for h, d in zip(readers, offsets):
            started.append(s.start("direct-reader", h, [node, "--role", "direct-reader", "--ready-offset", f"{d:.6f}",
                                                        *common]))
        readers_p = started[1:]
        cpu = CpuMeter()
        t0 = _arm_and_start(readers_p, s.timeout)
        target.send(f"start {t0:.6f}")
        cpu.start()
        results = _collect(readers_p, "role", "direct-reader", s.timeout)
        busy = cpu.stop()
        makespan, stall = _stalls(results, t0)
        return Run(makespan, stall, makespan, busy, _verify(readers_p, s.timeout))
    finally:
        _finish(started)


def mpi_available(s):
    return s.has("tensorhub-cluster-mpi") and shutil.which("mpirun") is not None


TUNED_BCAST = ["--mca", "coll_tuned_use_dynamic_rules", "1", "--mca", "coll_tuned_bcast_algorithm", "3",
               "--mca", "coll_tuned_bcast_algorithm_segmentsize", "262144"]


def mpi_bcast(s, trainer, readers, offsets, tuned):
    """Rank 0 on the trainer, one rank per reader host; mpirun runs in the
    trainer's namespace and reaches the others through an rsh agent that
    enters the namespace of the address it is given."""
    hosts = [trainer] + list(readers)
    agent = os.path.join(s.workdir, "netns-rsh")
    with open(agent, "w") as f:
        f.write("#!/bin/sh\n# rsh agent for mpirun: $1 is an address of an emulated host.\n")
        f.write('case "$1" in\n')
        for h in hosts:  # each host under its own name, as mpirun itself
            f.write(f'  {h.ip}) shift; exec {shlex.join(s.net.exec_prefix(h, hostname=True))} sh -c "$*" ;;\n')
        f.write('  *) echo "netns-rsh: unknown host $1" >&2; exit 1 ;;\nesac\n')
    os.chmod(agent, 0o755)
    argv = ["mpirun", "--allow-run-as-root", "-np", str(len(hosts)),
            "--host", ",".join(f"{h.ip}:1" for h in hosts),
            # plm rsh: the environment may name another launcher (a container's
            # OMPI_MCA_plm=isolated starts every rank on this host).
            "--mca", "plm", "rsh", "--mca", "plm_rsh_agent", agent, "--mca", "plm_rsh_no_tree_spawn", "1",
            "--mca", "pml", "ob1", "--mca", "btl", "tcp,self",
            "--mca", "btl_tcp_if_include", "eth0", "--mca", "oob_tcp_if_include", "eth0",
            # More ranks than cores: polling ranks would starve the forwarding ones.
            "--mca", "mpi_yield_when_idle", "1", "--bind-to", "none",
            *(TUNED_BCAST if tuned else []),
            s.program("tensorhub-cluster-mpi"), "--bytes", str(s.size), "--tensors", str(s.tensors),
            "--offsets", ",".join(f"{d:.6f}" for d in [0.0] + list(offsets))]
    proc = s.start("mpirun", trainer, argv, hostname=True)
    try:
        t0 = _arm_and_start([proc], s.timeout)
        cpu = CpuMeter()
        cpu.start()
        deadline = time.monotonic() + s.timeout
        ranks = {}
        busy = None
        while len(ranks) < len(hosts):
            r = proc.expect_json("role", "mpi", deadline - time.monotonic())
            ranks[r["rank"]] = r
            if busy is None:
                busy = cpu.stop()  # the first line comes after the closing barrier
        results = [ranks[i] for i in range(1, len(hosts))]
        makespan, stall = _stalls(results, t0)
        ok = all(r["verified"] for r in ranks.values())
        return Run(makespan, stall, ranks[0]["done"] - t0, busy, ok)
    except BaseException:
        proc.kill()  # a launch that hung does not quit when asked: no 30 s wait
        raise
    finally:
        proc.finish(timeout=30)
        s.net.kill_inside()  # orted daemons that outlived mpirun


def redis_available(s):
    return s.has("tensorhub-cluster-redis") and shutil.which("redis-server") is not None


def redis(s, store, trainer, readers, offsets):
    """The trainer pushes chunk-sized values to a Redis server on its own
    host; readers poll for the version's "done" key, then pull every chunk.
    The trainer is blocked for the push."""
    started = []
    try:
        server = s.start("redis-server", store, [
            shutil.which("redis-server"), "--bind", store.ip, "--port", "6379", "--protected-mode", "no",
            "--save", "", "--appendonly", "no", "--maxmemory", str(2 * s.size + (256 << 20)),
            "--maxmemory-policy", "noeviction", "--dir", s.workdir])
        started.append(server)
        server.expect(lambda o: isinstance(o, str) and "Ready to accept connections" in o, 30)
        prog = s.program("tensorhub-cluster-redis")
        common = ["--host", store.ip, "--bytes", str(s.size), "--tensors", str(s.tensors),
                  "--chunk-mb", str(s.redis_chunk_mb)]
        push = s.start("redis-push", trainer, [prog, "--role", "push", *common])
        started.append(push)
        pulls = [s.start("redis-pull", h, [prog, "--role", "pull", "--ready-offset", f"{d:.6f}", *common])
                 for h, d in zip(readers, offsets)]
        started.extend(pulls)
        t0 = _arm_and_start([push] + pulls, s.timeout)
        cpu = CpuMeter()
        cpu.start()
        pushed = push.expect_json("role", "push", s.timeout)
        results = _collect(pulls, "role", "pull", s.timeout)
        busy = cpu.stop()
        makespan, stall = _stalls(results, t0)
        return Run(makespan, stall, pushed["done"] - t0, busy, _verify(pulls, s.timeout),
                   {"push_s": pushed["done"] - pushed["start"]})
    finally:
        _finish(started[1:])
        if started:
            started[0].kill(signal.SIGTERM)


__all__ = ["Run", "Setup", "ProcError", "tensorhub", "tensorhub_versions", "trainer_direct", "mpi_bcast", "mpi_available", "redis",
           "redis_available"]
