"""Emulated hosts: Linux network namespaces, each with one veth "NIC" (eth0)
on a bridge, shaped with tc tbf to a bandwidth in both directions; optionally
two "datacenters" (bridges) joined by a thinner shaped veth link.

Every name starts with "thc<pid>" (interface names are limited to 15
characters), so that leftovers of a run that was killed are recognised and
removed by the next one, and two runs never touch each other's hosts. No
address is given to anything in the root namespace: only the namespaces'
eth0 carry the addresses assigned here (10.77.0.0/24).
"""

import os
import re
import signal
import subprocess

SUBNET = "10.77.0"
_NAME = re.compile(r"^thc(\d+)")

# tbf counts whole frames; a full TCP segment carries 1448 bytes of payload
# (timestamps on) in a 1514-byte frame.
GOODPUT = 1448 / 1514


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def available():
    """Whether this process may create namespaces (root and iproute2)."""
    if os.geteuid() != 0:
        return False
    try:
        return _ip("netns", "list", check=False).returncode == 0
    except FileNotFoundError:
        return False


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def clean_stale():
    """Removes namespaces and links left by runs whose process is gone."""
    for line in _ip("netns", "list").stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = _NAME.match(name)
        if m and not _pid_alive(int(m.group(1))):
            _ip("netns", "del", name, check=False)
    for line in _ip("-o", "link", "show").stdout.splitlines():
        parts = line.split(":")
        if len(parts) < 2:
            continue
        name = parts[1].strip().split("@")[0]
        m = _NAME.match(name)
        if m and not _pid_alive(int(m.group(1))):
            _ip("link", "del", name, check=False)


# How long an emulated NIC queues what waits for its shaper (tbf latency).
QUEUE_MS = 50


def _shape(dev, gbit, ns=None, queue_ms=QUEUE_MS):
    """tbf at gbit; what waits for it queues up to queue_ms (then drops)."""
    rate_bytes = gbit * 1e9 / 8
    burst = max(int(rate_bytes / 250), 128 * 1024)
    cmd = ["tc"] + (["-n", ns] if ns else []) + [
        "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{int(gbit * 1000)}mbit",
        "burst", str(burst), "latency", f"{queue_ms}ms"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)


class Host:
    def __init__(self, name, ns, ip, dc):
        self.name, self.ns, self.ip, self.dc = name, ns, ip, dc

    def __repr__(self):
        return f"{self.name}({self.ip}, {self.dc})"


class Network:
    """Build with add_dc / add_host / join_dcs; teardown() removes it all and
    may be called any number of times."""

    def __init__(self, queue_ms=QUEUE_MS):
        self.queue_ms = queue_ms
        self.prefix = f"thc{os.getpid()}"
        self.hosts = []
        self._bridges = {}
        self._links = []
        self._namespaces = []

    def add_dc(self, dc):
        br = f"{self.prefix}b{len(self._bridges)}"
        _ip("link", "add", br, "type", "bridge")
        self._links.append(br)
        _ip("link", "set", br, "up")
        self._bridges[dc] = br
        return br

    def add_host(self, name, dc, gbit):
        i = len(self.hosts) + 1
        ns = f"{self.prefix}h{i}"
        outside = f"{self.prefix}v{i}"
        _ip("netns", "add", ns)
        self._namespaces.append(ns)
        _ip("link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns", ns)
        self._links.append(outside)
        _ip("link", "set", outside, "master", self._bridges[dc])
        _ip("link", "set", outside, "up")
        ip = f"{SUBNET}.{i}"
        _ip("-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        # Every connection starts cold: the kernel would otherwise start a
        # connection to a host with the window and threshold that the last
        # one to it ended with, and a system would profit from, or pay for,
        # the one run before it on the same pair of hosts.
        subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.tcp_no_metrics_save=1"], check=True)
        _shape("eth0", gbit, ns, self.queue_ms)  # what the host sends
        _shape(outside, gbit, queue_ms=self.queue_ms)  # what it receives
        host = Host(name, ns, ip, dc)
        self.hosts.append(host)
        return host

    def join_dcs(self, dc1, dc2, gbit):
        """The inter-datacenter link: a veth pair between the two bridges,
        shaped at gbit in each direction."""
        a, b = f"{self.prefix}w1", f"{self.prefix}w2"
        _ip("link", "add", a, "type", "veth", "peer", "name", b)
        self._links.append(a)
        for dev, dc in ((a, dc1), (b, dc2)):
            _ip("link", "set", dev, "master", self._bridges[dc])
            _ip("link", "set", dev, "up")
            _shape(dev, gbit, queue_ms=self.queue_ms)

    def exec_prefix(self, host, hostname=False):
        """The command prefix that runs a program on host. hostname: also in
        a UTS namespace of its own named after the host, for programs that
        tell hosts apart by name (Open MPI: with the machine's one name for
        every host it merged them into one node, or lost a daemon's launch)."""
        prefix = ["ip", "netns", "exec", host.ns]
        if hostname:
            prefix += ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', host.name]
        return prefix

    def kill_inside(self):
        """Kills whatever still runs in this network's namespaces: only the
        benchmark starts processes there, and some (mpirun's daemonized
        orted) leave the session they were started in."""
        for ns in self._namespaces:
            for pid in _ip("netns", "pids", ns, check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass

    def teardown(self):
        self.kill_inside()
        for ns in self._namespaces:
            _ip("netns", "del", ns, check=False)
        for link in self._links:
            _ip("link", "del", link, check=False)
        self._namespaces, self._links, self._bridges, self.hosts = [], [], {}, []
