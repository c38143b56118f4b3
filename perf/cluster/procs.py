"""The benchmark's processes inside the emulated hosts, driven with the line
protocol of node_io.hpp. Every process runs in its own session, so stopping
it (and whatever it started, e.g. mpirun's daemons) is one killpg by its id.
Every wait has a deadline."""

import json
import os
import queue
import signal
import subprocess
import threading
import time

_running = []  # every process started and not yet reaped, for stop_all()


class ProcError(RuntimeError):
    def summary(self):
        """One line: what happened and the first line the process said about
        it (Open MPI frames its messages in rules of dashes)."""
        lines = [l.strip() for l in str(self).splitlines()]
        said = [l for l in lines[1:] if l and set(l) != {"-"}]
        return lines[0] + (" " + said[0] if said else "")


class Proc:
    def __init__(self, name, argv, env=None):
        self.name = name
        self._lines = queue.Queue()
        self._stderr = []
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, bufsize=1, env=env, start_new_session=True)
        _running.append(self)
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stdout(self):
        for line in self.p.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def _read_stderr(self):
        # $TH_CLUSTER_LOG_DIR keeps every process's whole stderr, for digging.
        log_dir = os.environ.get("TH_CLUSTER_LOG_DIR")
        log = open(os.path.join(log_dir, f"{self.name.replace(' ', '_')}.{self.p.pid}.log"), "w") if log_dir else None
        for line in self.p.stderr:
            self._stderr.append(line.rstrip("\n"))
            del self._stderr[:-40]
            if log:
                log.write(line)
        if log:
            log.close()

    def stderr_tail(self):
        return "\n".join(self._stderr[-15:])

    def send(self, line):
        try:
            self.p.stdin.write(line + "\n")
            self.p.stdin.flush()
        except (BrokenPipeError, OSError):
            raise ProcError(f"{self.name} exited early:\n{self.stderr_tail()}")

    def line(self, timeout):
        """The next stdout line; raises when the process ends or the time passes."""
        try:
            line = self._lines.get(timeout=max(0.0, timeout))
        except queue.Empty:
            raise ProcError(f"{self.name}: nothing within {timeout:.0f} s:\n{self.stderr_tail()}")
        if line is None:
            self._lines.put(None)
            self.p.wait()
            raise ProcError(f"{self.name} exited with status {self.p.returncode}:\n{self.stderr_tail()}")
        return line

    def expect(self, pred, timeout):
        """The first line accepted by pred (a JSON object, or raw text for
        non-JSON lines), skipping others."""
        deadline = time.monotonic() + timeout
        while True:
            raw = self.line(deadline - time.monotonic())
            try:
                obj = json.loads(raw)
            except ValueError:
                obj = raw
            if pred(obj):
                return obj

    def expect_json(self, key, value=None, timeout=60):
        return self.expect(lambda o: isinstance(o, dict) and key in o and (value is None or o[key] == value), timeout)

    def finish(self, timeout=30):
        """Asks the process to quit and waits; kills it past the timeout."""
        try:
            self.send("quit")
            self.p.stdin.close()
        except (ProcError, OSError):
            pass
        try:
            self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        if self in _running:
            _running.remove(self)

    def kill(self, sig=signal.SIGKILL):
        try:
            os.killpg(self.p.pid, sig)
        except ProcessLookupError:
            pass
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        if self in _running:
            _running.remove(self)


def stop_all():
    """Terminates every process still running: politely, then by force."""
    for proc in list(_running):
        try:
            os.killpg(proc.p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 3
    for proc in list(_running):
        try:
            proc.p.wait(timeout=max(0.1, deadline - time.monotonic()))
            _running.remove(proc)
        except subprocess.TimeoutExpired:
            proc.kill()


class CpuMeter:
    """Busy fraction of all CPUs between start() and stop(), from /proc/stat.
    Time spent by niced processes counts as idle: the benchmark runs at
    nice 0, so niced work (e.g. a compile beside it) only takes what it leaves."""

    @staticmethod
    def _sample():
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        idle = fields[1] + fields[3] + (fields[4] if len(fields) > 4 else 0)
        return sum(fields[:8]), idle

    def start(self):
        self._t0 = self._sample()

    def stop(self):
        total, idle = self._sample()
        dt, di = total - self._t0[0], idle - self._t0[1]
        return 1.0 - di / dt if dt > 0 else 0.0
