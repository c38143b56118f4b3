#!/usr/bin/env python3
"""An RL weight-sync loop with a real transformers model on tensorhub.

One trainer process and several rollout processes, each with its own copy of a
tiny Llama causal LM built from a config (no download; the trainer's
initialisation is seeded, each rollout starts from different random weights):

- the trainer runs AdamW steps and publishes every version *in place*
  (tensorhub.torch.Publisher: the replica is the parameter storage; the
  optimizer's step pre-hook withdraws the previous version first, so no reader
  ever reads a parameter while it is being overwritten), with digests;
- each rollout waits for a newer version, fetches it straight into its model's
  parameters (tensorhub.torch.Receiver: names, dtypes and shapes checked
  first; digests checked after), computes logits for a fixed prompt and
  generates a few tokens greedily, and serves the version on to the others;
- this process compares every rollout's logits and tokens with the trainer's
  for the same version, bit for bit.

Two things that happen to real jobs are part of the run: one rollout
(--kill) is SIGKILLed in the middle of fetching a version, and one (--late)
starts only after some versions were published and must get the newest one.
The trainer publishes version v+1 once every live rollout reported version v.

    python examples/python/torch_rl.py --versions 6 --rollouts 3 --kill 1 --late 2
    python examples/python/torch_rl.py --device cuda   # every model on the GPU

Prints one line per event, then one JSON line (the summary the test reads).
Exit code 0 only if every comparison matched and every surviving process
exited cleanly. Needs torch and transformers (scripts/setup.sh installs them).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
from multiprocessing.connection import Connection, wait
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

try:
    import tensorhub
except ImportError:  # running from a source checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bindings" / "python"))
    import tensorhub

MODEL = "policy"
PROMPT = [[1, 17, 42, 99, 7, 3], [5, 6, 7, 8, 9, 10]]
NEW_TOKENS = 6


@dataclass(frozen=True)
class Options:
    url: str
    versions: int
    rollouts: int
    kill: int | None   # rollout SIGKILLed while it fetches version kill_at
    kill_at: int
    late: int | None   # rollout started once version late_at is out
    late_at: int
    timeout: float
    device: str        # where every process keeps its model: "cpu", "cuda", "cuda:1"


def build_model(seed: int, device: str) -> Any:
    """The tiny causal LM, built from a config on `device`; `seed` picks its initial weights."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=True, attn_implementation="eager")
    return LlamaForCausalLM(config).to(device)


def evaluate(model: Any, device: str) -> tuple[bytes, list[int], list[list[int]]]:
    """(logits bytes, logits shape, greedy continuation) for PROMPT."""
    import torch

    model.eval()
    prompt = torch.tensor(PROMPT, device=device)
    with torch.no_grad():
        logits = model(prompt).logits
        tokens = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=NEW_TOKENS,
                                do_sample=False, pad_token_id=0)
    return logits.cpu().numpy().tobytes(), list(logits.shape), tokens[:, len(PROMPT[0]):].tolist()


_parent = 0  # this process's parent when it started: another one means the driver is gone


def setup_process(device: str) -> None:
    global _parent
    _parent = os.getppid()
    if device.startswith("cuda"):
        # The same GPU kernels in every process, so that their results are
        # comparable bit for bit (cuBLAS needs a fixed workspace for that).
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch

    # One thread: every process computes with the same kernels in the same
    # order (bit-for-bit comparable), and 2 cores are shared by all of them.
    torch.set_num_threads(1)
    if device.startswith("cuda"):
        torch.use_deterministic_algorithms(True)


def stopped(stop: Any, timeout: float) -> bool:
    """Waits up to `timeout` for the driver's stop flag; True once it is set,
    or once this process's parent (the driver's fork server) is gone, so that
    no process outlives the driver.

    The flag is a lock-free shared byte, polled: a process SIGKILLed while it
    waits on a multiprocessing Event or Queue leaves their shared locks and
    counters behind, and the next set() or put() from another process hangs."""
    deadline = time.monotonic() + timeout
    while not stop.value and os.getppid() == _parent:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def trainer(o: Options, events: Connection, go: Connection, stop: Any) -> None:
    setup_process(o.device)
    import torch
    import tensorhub.torch as tht

    model = build_model(seed=0, device=o.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data = torch.Generator().manual_seed(1)
    with tensorhub.Client(o.url, name="trainer", labels={"role": "trainer"}, timeout=5) as client:
        publisher = tht.Publisher(client, MODEL, model, digest=True, chunk_bytes=64 << 10)
        publisher.attach(optimizer)  # withdraws the served version before each step
        events.send(("ready", "trainer", None))
        for version in range(1, o.versions + 1):
            if not go.poll(o.timeout) or go.recv() != version:  # the driver's go
                raise SystemExit(f"trainer: no go from the driver for version {version}")
            model.train()
            batch = torch.randint(0, 256, (4, 12), generator=data).to(o.device)
            model(batch, labels=batch).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            publisher.publish(version)
            logits, shape, tokens = evaluate(model, o.device)
            events.send(("published", "trainer", {"version": version, "logits": logits, "shape": shape,
                                                 "tokens": tokens}))
        stopped(stop, o.timeout)  # keep serving until the rollouts are done


def rollout(o: Options, index: int, events: Connection, stop: Any) -> None:
    setup_process(o.device)
    import tensorhub.torch as tht

    name = f"rollout-{index}"
    model = build_model(seed=100 + index, device=o.device)  # not the trainer's weights until a fetch overwrites them
    # The rollout that is killed reads one chunk at a time, so that it is
    # caught with part of a version in its parameters: one read in flight,
    # over tcp (on one host, shared-memory reads of a fast lane cover several
    # chunks each, and this model's whole shard could land in one).
    doomed = index == o.kill
    if doomed:
        os.environ["UCX_TLS"] = "tcp"
    with tensorhub.Client(o.url, name=name, labels={"role": "rollout"}, timeout=5,
                          max_inflight=1 if doomed else 8) as client:
        receiver = tht.Receiver(client, MODEL, model)
        events.send(("ready", name, None))
        have = 0
        while have < o.versions and not stop.value:
            client.wait_for_version(MODEL, newer_than=have, timeout=o.timeout)
            progress = None
            target = client.resolve(MODEL)
            if doomed and target >= o.kill_at:
                def progress(done: int, total: int) -> None:
                    if done > 0:  # some of the version is in the parameters, not all of it (one read in flight)
                        events.send(("stalled", name, {"version": target, "done": done, "total": total}))
                        stopped(stop, o.timeout * 5)  # inside the fetch, until the driver kills this process
                        raise SystemExit(f"{name}: still alive after it stalled")
            have = receiver.fetch(timeout=o.timeout, progress=progress, progress_interval=0)
            logits, shape, tokens = evaluate(model, o.device)
            events.send(("fetched", name, {"version": have, "logits": logits, "shape": shape, "tokens": tokens,
                                          "stats": client.last_sync_stats}))
        stopped(stop, o.timeout)  # keep serving the last version to the others


@dataclass
class Report:
    trainer: dict[int, dict[str, Any]]
    seen: dict[str, list[int]]
    mismatches: list[str]
    killed: dict[str, Any] | None = None
    late: dict[str, Any] | None = None
    exit_codes: dict[str, int | None] | None = None
    seconds: float = 0.0


def compare(report: Report, who: str, got: dict[str, Any]) -> str:
    want = report.trainer[got["version"]]
    same_logits = got["logits"] == want["logits"]
    same_tokens = got["tokens"] == want["tokens"]
    if same_logits and same_tokens:
        return "logits and tokens equal the trainer's, bit for bit"
    a = np.frombuffer(got["logits"], np.float32)
    b = np.frombuffer(want["logits"], np.float32)
    diff = float(np.max(np.abs(a - b))) if a.shape == b.shape else float("nan")
    report.mismatches.append(f"{who} version {got['version']}: logits equal {same_logits} (max |diff| {diff}), "
                             f"tokens equal {same_tokens}")
    return f"MISMATCH (max |logit diff| {diff})"


def run(o: Options) -> int:
    # A fork server that has imported torch and transformers once starts each
    # process in well under a second; spawning re-imports them (3-5 s of CPU each).
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["__main__", "torch", "transformers.models.llama.modeling_llama"])
    # One pipe per process, so that a killed one only closes its own.
    stop = ctx.RawValue("b", 0)
    readers: dict[Connection, str] = {}

    go_reader, go = ctx.Pipe(duplex=False)
    trainer_events, trainer_writer = ctx.Pipe(duplex=False)
    readers[trainer_events] = "trainer"
    procs: dict[str, Any] = {"trainer": ctx.Process(target=trainer, args=(o, trainer_writer, go_reader, stop),
                                                    name="trainer")}

    def rollout_process(i: int) -> Any:
        reader, writer = ctx.Pipe(duplex=False)
        readers[reader] = f"rollout-{i}"
        return ctx.Process(target=rollout, args=(o, i, writer, stop), name=f"rollout-{i}")

    for i in range(o.rollouts):
        if i != o.late:
            procs[f"rollout-{i}"] = rollout_process(i)
    report = Report(trainer={}, seen={name: [] for name in procs if name != "trainer"}, mismatches=[])
    first = {"trainer"} | set(report.seen)  # ready before version 1
    ready: set[str] = set()
    live: set[str] = set()  # the rollouts the trainer waits for
    latest, sent = 0, 0     # the newest version published, and the newest the trainer was told to make
    pending: list[tuple[str, dict[str, Any]]] = []  # rollout reports not compared yet
    t0 = time.monotonic()
    for p in procs.values():
        p.start()
    try:
        deadline = time.monotonic() + o.timeout * (o.versions + 2)
        while True:
            if time.monotonic() > deadline:
                print("torch_rl: the run did not finish in time", file=sys.stderr)
                return 1
            dead = [n for n, p in procs.items() if p.exitcode not in (None, 0) and n != (report.killed or {}).get("rollout")]
            if dead:
                print(f"torch_rl: {dead[0]} failed (exit code {procs[dead[0]].exitcode})", file=sys.stderr)
                return 1
            kind, who, data = "", "", None
            for reader in wait(list(readers), timeout=0.5)[:1]:
                try:
                    kind, who, data = reader.recv()
                except EOFError:  # that process is gone: its exit code tells the rest
                    del readers[reader]
            if kind == "ready":
                ready.add(who)
                if who != "trainer":
                    live.add(who)
                print(f"[{who}] ready after {time.monotonic() - t0:.1f} s", flush=True)
            elif kind == "published":
                latest = data["version"]
                report.trainer[latest] = data
                print(f"[trainer] step {latest}: published version {latest} in place", flush=True)
                if o.late is not None and latest == o.late_at:
                    name = f"rollout-{o.late}"
                    procs[name] = rollout_process(o.late)
                    procs[name].start()
                    report.seen[name] = []
                    report.late = {"rollout": name, "started_after": latest}
                    live.add(name)  # the trainer waits until it caught up
                    print(f"[driver] started {name} late, after version {latest}", flush=True)
            elif kind == "stalled":
                procs[who].kill()
                procs[who].join(10)
                live.discard(who)
                report.killed = {"rollout": who, **data}
                print(f"[driver] killed {who} in the middle of fetching version {data['version']} "
                      f"({data['done']} of {data['total']} bytes in)", flush=True)
            elif kind == "fetched":
                report.seen[who].append(data["version"])
                if report.late and who == report.late["rollout"] and "first_version" not in report.late:
                    report.late.update(first_version=data["version"], latest_when_fetched=latest)
                pending.append((who, data))
            # A rollout may report a version before the trainer's evaluation of it arrives.
            for who, data in [e for e in pending if e[1]["version"] in report.trainer]:
                pending.remove((who, data))
                verdict = compare(report, who, data)
                s = data["stats"] or {}
                print(f"[{who}] version {data['version']}: {verdict} ({s.get('bytes', 0)} bytes from "
                      f"{s.get('sources', 0)} source(s))", flush=True)
            # Lockstep: version v+1 once every live rollout holds version v.
            if sent == 0 and ready >= first:
                sent = 1
                go.send(1)
            elif 0 < sent == latest < o.versions and all(latest in report.seen[n] for n in live):
                sent += 1
                go.send(sent)
            if latest == o.versions and all(o.versions in report.seen[n] for n in live) and not pending:
                break
    finally:
        for who, data in pending:
            report.mismatches.append(f"{who} fetched version {data['version']}, which the trainer never evaluated")
        stop.value = 1
        for p in procs.values():
            p.join(30)
            if p.is_alive():
                p.kill()
                p.join(5)
        report.exit_codes = {n: p.exitcode for n, p in procs.items()}
        report.seconds = round(time.monotonic() - t0, 2)
        summary = asdict(report)
        summary["trainer"] = sorted(report.trainer)
        print(json.dumps(summary), flush=True)
    bad_exit = {n: c for n, c in report.exit_codes.items() if c != 0 and n != (report.killed or {}).get("rollout")}
    if bad_exit:
        print(f"torch_rl: processes exited with {bad_exit}", file=sys.stderr)
        return 1
    return 1 if report.mismatches else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--versions", type=int, default=6, help="optimizer steps, each published as a version")
    parser.add_argument("--rollouts", type=int, default=3, help="rollout processes, including --kill and --late")
    parser.add_argument("--kill", type=int, default=1, help="rollout to SIGKILL mid-fetch (-1: none)")
    parser.add_argument("--kill-at", type=int, default=2, help="the version it is fetching when killed")
    parser.add_argument("--late", type=int, default=2, help="rollout that starts late (-1: none)")
    parser.add_argument("--late-at", type=int, default=3, help="it starts once this version is published")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds any single wait may take")
    parser.add_argument("--server", help="URL of a running tensorhub-server (default: embedded)")
    parser.add_argument("--device", default="cpu",
                        help="where every model lives: cpu, or cuda (needs a libtensorhub built with CUDA)")
    args = parser.parse_args()
    kill = None if args.kill < 0 else args.kill
    late = None if args.late < 0 else args.late
    if args.versions < 2 or args.rollouts < 1:
        parser.error("--versions must be at least 2 and --rollouts at least 1")
    for what, i in (("--kill", kill), ("--late", late)):
        if i is not None and not 0 <= i < args.rollouts:
            parser.error(f"{what} must name a rollout in [0, {args.rollouts})")
    if kill is not None and kill == late:
        parser.error("--kill and --late must be different rollouts")
    if late is not None and not 1 <= args.late_at < args.versions:
        parser.error("--late-at must be a version before the last one")
    if kill is not None and not 1 <= args.kill_at <= args.versions:
        parser.error("--kill-at must be one of the versions")

    def options(url: str) -> Options:
        return Options(url, args.versions, args.rollouts, kill, args.kill_at, late, args.late_at, args.timeout,
                       args.device)

    if args.server:
        return run(options(args.server))
    # A short lease: a killed rollout's replicas are dropped within 2 s.
    with tensorhub.Server(lease_ms=2000, max_readers_per_source=1) as server:
        print(f"tensorhub {tensorhub.__version__}: embedded server at {server.url}", flush=True)
        return run(options(server.url))


if __name__ == "__main__":
    sys.exit(main())
