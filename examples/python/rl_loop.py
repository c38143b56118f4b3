#!/usr/bin/env python3
"""A small RL-style loop on tensorhub: one trainer, N rollout workers.

The trainer "trains" (perturbs numpy weights) and publishes every step as a
new version of the policy, from two alternating weight buffers: the replica of
the older buffer is released before that buffer is overwritten, so the newest
version is always being served while the next one is computed. Rollout
workers wait for a newer version between "generations", fetch the newest one
into one of their own two buffers and serve it on to the other rollouts.

    python examples/python/rl_loop.py --steps 5 --rollouts 3 --mb 16

By default the metadata server is embedded in this process; --server URL uses
a running tensorhub-server instead. rollout-0 draws a progress bar while it
fetches (on a terminal, or always with --progress); every fetch prints its
summary (client.last_sync_stats, the dict one would hand to wandb.log). Needs numpy and the tensorhub package
(pip install ./bindings/python, or PYTHONPATH=bindings/python).
"""

from __future__ import annotations

import argparse
import multiprocessing
import queue
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

try:
    import tensorhub
except ImportError:  # running from a source checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bindings" / "python"))
    import tensorhub

MODEL = "policy"


@dataclass(frozen=True)
class Options:
    url: str
    steps: int
    rollouts: int
    mb: float
    tensors: int
    train_time: float
    progress: bool


def new_weights(o: Options) -> dict[str, np.ndarray]:
    """The policy's buffers: `tensors` float32 matrices of about mb MiB in all,
    plus meta.step and meta.check so that readers can verify what they got."""
    per = max(1, int(o.mb * (1 << 20)) // 4 // o.tensors)
    cols = 256 if per >= 256 else 1
    out: dict[str, np.ndarray] = {f"layers.{i}.weight": np.zeros((per // cols, cols), np.float32)
                                  for i in range(o.tensors)}
    out["meta.step"] = np.zeros(1, np.int64)
    out["meta.check"] = np.zeros(1, np.float64)
    return out


def checksum(weights: dict[str, np.ndarray]) -> float:
    return float(sum(np.sum(a, dtype=np.float64) for k, a in weights.items() if not k.startswith("meta.")))


def trainer(o: Options, stop: Any) -> None:
    rng = np.random.default_rng(0)
    with tensorhub.Client(o.url, name="trainer", labels={"role": "trainer"}) as client:
        buffers = [new_weights(o), new_weights(o)]
        replicas: list[tensorhub.Replica | None] = [None, None]
        for step in range(1, o.steps + 1):
            t0 = time.monotonic()
            latest, target = buffers[(step - 1) % 2], buffers[step % 2]
            # The target buffer holds version step-2: withdraw it before overwriting.
            previous = replicas[step % 2]
            if previous is not None:
                previous.release()
            for name, w in target.items():
                if not name.startswith("meta."):
                    np.add(latest[name], 0.01 * rng.standard_normal(w.shape, dtype=np.float32), out=w)
            target["meta.step"][0] = step
            target["meta.check"][0] = checksum(target)
            time.sleep(o.train_time)  # the rest of an optimizer step
            t1 = time.monotonic()
            replicas[step % 2] = client.publish(MODEL, step, target)
            print(f"[trainer]   step {step}: trained in {t1 - t0:.3f} s, published version {step} "
                  f"in {(time.monotonic() - t1) * 1e3:.1f} ms", flush=True)
        # Keep serving the last versions until every rollout has the final one.
        stop.wait(120)


class ProgressBar:
    """A one-line text bar for fetch(progress=...): redrawn in place on stderr."""

    def __init__(self, label: str, width: int = 30) -> None:
        self.label, self.width = label, width

    def __call__(self, done: int, total: int) -> None:
        filled = self.width * done // total if total else self.width
        end = "\n" if done >= total else ""
        print(f"\r{self.label} [{'#' * filled}{'.' * (self.width - filled)}] {100 * done // max(total, 1):3d}% "
              f"{done / (1 << 20):6.1f}/{total / (1 << 20):.1f} MiB", end=end, file=sys.stderr, flush=True)


def fetch_latest(client: tensorhub.Client, weights: dict[str, np.ndarray], attempts: int = 5,
                 bar: ProgressBar | None = None) -> int:
    """Fetches the newest version into `weights` and serves it from there."""
    for attempt in range(1, attempts + 1):
        try:
            return client.fetch(MODEL, into=weights, progress=bar)
        except tensorhub.Unavailable:
            # Every holder of the version LATEST named went away mid-read
            # (the trainer reuses a buffer two versions later; rollouts move
            # on): by then a newer version exists, so read that one.
            if attempt == attempts:
                raise
    raise AssertionError("unreachable")


def rollout(o: Options, index: int, done: Any, stop: Any) -> None:
    name = f"rollout-{index}"
    rnd = random.Random(index)
    with tensorhub.Client(o.url, name=name, labels={"role": "rollout"}) as client:
        buffers = [new_weights(o), new_weights(o)]
        have = 0
        seen: list[int] = []
        while have < o.steps:
            t0 = time.monotonic()
            client.wait_for_version(MODEL, newer_than=have, timeout=60)
            t1 = time.monotonic()
            # Fetch into the buffer not being served; the client releases the
            # previous replica only once this fetch succeeded.
            weights = buffers[len(seen) % 2]
            bar = ProgressBar(f"[{name}] fetching") if index == 0 and o.progress else None
            have = fetch_latest(client, weights, bar=bar)
            t2 = time.monotonic()
            stats = client.last_sync_stats or {}
            if weights["meta.step"][0] != have or weights["meta.check"][0] != checksum(weights):
                raise SystemExit(f"[{name}] version {have} arrived corrupted")
            seen.append(have)
            print(f"[{name}] version {have}: sync {(t2 - t0) * 1e3:7.1f} ms "
                  f"(waited {(t1 - t0) * 1e3:6.1f}, fetched {(t2 - t1) * 1e3:6.1f}: "
                  f"{stats.get('gbps', 0):.2f} GB/s from {stats.get('sources', 0)} source(s), "
                  f"{stats.get('replans', 0)} replans), verified", flush=True)
            time.sleep(rnd.uniform(0.02, 0.15))  # "generation" with these weights
        done.put((index, seen))
        stop.wait(120)  # keep serving until everyone is done


def who_read_from_whom(url: str, version: int) -> list[str]:
    status = tensorhub.server_status(url)
    names = {w["worker_id"]: w["name"] for w in status["workers"]}
    return [f"{names.get(r['reader'], r['reader'])} <- {names.get(r['source'], r['source'])}"
            for m in status["models"] if m["name"] == MODEL
            for v in m["versions"] if v["version"] == version
            for r in v["reads"]]


def run(o: Options) -> int:
    ctx = multiprocessing.get_context("spawn")
    done, stop = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=trainer, args=(o, stop), name="trainer")]
    procs += [ctx.Process(target=rollout, args=(o, i, done, stop), name=f"rollout-{i}") for i in range(o.rollouts)]
    for p in procs:
        p.start()
    finished: dict[int, list[int]] = {}
    try:
        while len(finished) < o.rollouts:
            try:
                index, seen = done.get(timeout=0.5)
                finished[index] = seen
            except queue.Empty:
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead:
                    print(f"rl_loop: {dead[0].name} failed (exit code {dead[0].exitcode})", file=sys.stderr)
                    return 1
        print(f"version {o.steps} replication (reader <- source):")
        for line in who_read_from_whom(o.url, o.steps):
            print(f"  {line}")
    finally:
        stop.set()
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    failed = [p for p in procs if p.exitcode != 0]
    for p in failed:
        print(f"rl_loop: {p.name} exited with code {p.exitcode}", file=sys.stderr)
    if failed:
        return 1
    for index in sorted(finished):
        print(f"rollout-{index} used versions {finished[index]}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5, help="training steps (versions published)")
    parser.add_argument("--rollouts", type=int, default=3, help="rollout worker processes")
    parser.add_argument("--mb", type=float, default=16, help="policy size in MiB")
    parser.add_argument("--tensors", type=int, default=8, help="weight tensors in the policy")
    parser.add_argument("--train-time", type=float, default=0.1, help="seconds per training step")
    parser.add_argument("--server", help="URL of a running tensorhub-server (default: embedded)")
    parser.add_argument("--progress", action="store_true", default=sys.stderr.isatty(),
                        help="draw rollout-0's fetch progress bar (default: when stderr is a terminal)")
    args = parser.parse_args()
    if args.steps < 1 or args.rollouts < 1 or args.tensors < 1 or args.mb <= 0:
        parser.error("--steps, --rollouts, --tensors and --mb must be positive")

    def options(url: str) -> Options:
        return Options(url, args.steps, args.rollouts, args.mb, args.tensors, args.train_time, args.progress)

    if args.server:
        return run(options(args.server))
    with tensorhub.Server() as server:
        print(f"tensorhub {tensorhub.__version__}: embedded server at {server.url}, 1 trainer, "
              f"{args.rollouts} rollouts, {args.steps} steps of {args.mb:g} MiB", flush=True)
        return run(options(server.url))


if __name__ == "__main__":
    sys.exit(main())
