#!/usr/bin/env python3
"""What tensorhub.torch costs on top of the raw Python calls, for a model of
many small tensors (default: 500 Linear(64, 64) layers, 1,000 tensors, 8.1 MiB).

Each round the trainer publishes a new version and a reader fetches it, both
clients in this process (the bytes still cross the data plane: loopback TCP).
Measured per round, median over --rounds:

  publish  raw        Client.publish(name, v, state_dict)
           floor      th_publish with the th_tensor array built once (the library's own cost)
           Publisher  tensorhub.torch.Publisher.publish(v) from the module (state_dict
                      walk, alias and overlap checks, withdrawing the previous version)
           +digest    the same with digest=True (BLAKE2b over every byte)
  fetch    raw        Client.fetch(into=state_dict) of a new version, serving it after
           floor      th_fetch with the th_tensor array built once
           Receiver   tensorhub.torch.Receiver.fetch() into the module's parameters
           +verify    the same with the publisher's digests checked
           Staging    tensorhub.torch.Staging.fetch() into owned buffers
           staged     Receiver(staging="cpu"): Staging, then a copy into the parameters
  stall    what a reader that wants the new version waits, once it is published:
           plain      Receiver.fetch() (the whole fetch)
           prefetch   Prefetcher.swap() after the background fetch landed the version
                      in the spare set while the module was in use: swap="pointer"
                      (param.data = spare) and swap="copy" (a copy into the parameters);
                      the background fetch's own time is shown beside it

Prints a table, then one JSON line.

    python3 perf/torch_state_dict.py [--layers 500] [--dim 64] [--rounds 30]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

try:
    import tensorhub
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bindings" / "python"))
    import tensorhub
import torch

import tensorhub.torch as tht
from tensorhub._tensors import to_c, views_of


def model(layers: int, dim: int, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(*[torch.nn.Linear(dim, dim) for _ in range(layers)])


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=500, help="Linear layers (2 tensors each)")
    parser.add_argument("--dim", type=int, default=64, help="each layer is dim x dim plus a bias")
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(1)

    src, dst = model(args.layers, args.dim, 0), model(args.layers, args.dim, 1)
    n_tensors = len(src.state_dict())
    nbytes = sum(t.numel() * t.element_size() for t in src.state_dict().values())
    results: dict[str, float] = {}

    with tensorhub.Server() as server, tensorhub.Client(server, name="trainer") as trainer, \
            tensorhub.Client(server, name="reader") as reader:
        version = 0

        def rounds(name: str, publish: Callable[[int], Any], fetch: Callable[[int], Any]) -> None:
            nonlocal version
            pub_t, fetch_t = [], []
            for _ in range(args.rounds + 2):  # the first two warm registration caches up
                version += 1
                t0 = time.perf_counter()
                publish(version)
                t1 = time.perf_counter()
                got = fetch(version)
                t2 = time.perf_counter()
                assert got == version, (name, got, version)
                pub_t.append(t1 - t0)
                fetch_t.append(t2 - t1)
            results[f"{name}_publish_ms"] = median_ms(pub_t[2:])
            results[f"{name}_fetch_ms"] = median_ms(fetch_t[2:])

        # raw: the binding's own calls on the same tensors.
        src_sd = {k: v.detach() for k, v in src.state_dict().items()}
        dst_sd = {k: v.detach() for k, v in dst.state_dict().items()}
        raw_replica: list[tensorhub.Replica] = []

        def raw_publish(v: int) -> None:
            if raw_replica:
                raw_replica.pop().release()
            raw_replica.append(trainer.publish("raw", v, src_sd))

        rounds("raw", raw_publish, lambda v: reader.fetch("raw", v, into=dst_sd))
        raw_replica.pop().release()
        reader.stop_serving("raw")

        # floor: the same C calls with the th_tensor arrays built once, as
        # tensorhub.torch keeps them: what the library itself costs.
        pub_views = views_of(src_sd, writable=False)
        pub_c = to_c(pub_views)
        dst_views = views_of(dst_sd, writable=True)
        dst_c = to_c(dst_views)
        floor_replicas: list[tensorhub.Replica] = []

        def floor_publish(v: int) -> None:
            if raw_replica:
                raw_replica.pop().release()
            raw_replica.append(trainer._publish("floor", v, pub_views, pub_c, 0, 1, 4 << 20))

        def floor_fetch(v: int) -> int:
            if floor_replicas:
                floor_replicas.pop().release()
            got, replica = reader._fetch("floor", v, dst_views, 0, None, serve=True, c_tensors=dst_c)
            assert replica is not None
            floor_replicas.append(replica)
            return got

        rounds("floor", floor_publish, floor_fetch)
        raw_replica.pop().release()
        floor_replicas.pop().release()

        for digest in (False, True):
            name = "torch_digest" if digest else "torch"
            publisher = tht.Publisher(trainer, name, src, digest=digest)
            receiver = tht.Receiver(reader, name, dst, verify=digest)
            rounds("digest" if digest else "module", publisher.publish, lambda v: receiver.fetch(v))
            receiver.close()
            publisher.close()

        publisher = tht.Publisher(trainer, "staging", src)
        staging = tht.Staging(reader, "staging")
        rounds("staging", publisher.publish, lambda v: staging.fetch(v).version)
        staging.close()
        publisher.close()

        publisher = tht.Publisher(trainer, "staged", src)
        receiver = tht.Receiver(reader, "staged", dst, staging="cpu")
        rounds("staged", publisher.publish, lambda v: receiver.fetch(v))
        receiver.close()
        publisher.close()

        # Stalls: the plain fetch is the Receiver's ("module" above); with a
        # prefetch, the version lands while the module is in use (here: the
        # reader waits until the background fetch is done), then swap() is timed.
        results["plain_stall_ms"] = results["module_fetch_ms"]
        for mode in ("pointer", "copy"):
            publisher = tht.Publisher(trainer, f"prefetch_{mode}", src)
            prefetcher = tht.Prefetcher(reader, f"prefetch_{mode}", dst, swap=mode)
            swaps, fetches = [], []
            for _ in range(args.rounds + 2):
                version += 1
                publisher.publish(version)
                prefetcher.prefetch(version, wait=False)
                while not prefetcher.ready:  # the module is in use meanwhile
                    time.sleep(0.0005)
                assert prefetcher.swap() == version
                assert prefetcher.last_swap_s is not None and prefetcher.last_fetch_s is not None
                swaps.append(prefetcher.last_swap_s)
                fetches.append(prefetcher.last_fetch_s)
            results[f"prefetch_{mode}_stall_ms"] = median_ms(swaps[2:])
            results[f"prefetch_{mode}_background_ms"] = median_ms(fetches[2:])
            prefetcher.close()
            publisher.close()

    raw_p, raw_f = results["raw_publish_ms"], results["raw_fetch_ms"]
    rows = [("raw Client.publish / Client.fetch", "raw"), ("floor: the C calls, th_tensor arrays kept", "floor"),
            ("Publisher / Receiver (in place)", "module"),
            ("  + digests (publish) / verify (fetch)", "digest"), ("Publisher / Staging", "staging"),
            ("Publisher / Receiver(staging='cpu')", "staged")]
    print(f"{n_tensors} tensors, {nbytes / 2**20:.1f} MiB, median of {args.rounds} rounds "
          f"(tensorhub {tensorhub.__version__}, torch {torch.__version__})")
    floor_p, floor_f = results["floor_publish_ms"], results["floor_fetch_ms"]
    print(f"{'':42} {'publish ms':>11} {'x raw':>6} {'x floor':>7} {'fetch ms':>9} {'x raw':>6} {'x floor':>7}")
    for label, key in rows:
        p, f = results[f"{key}_publish_ms"], results[f"{key}_fetch_ms"]
        print(f"{label:42} {p:11.2f} {p / raw_p:6.2f} {p / floor_p:7.2f} {f:9.2f} {f / raw_f:6.2f} {f / floor_f:7.2f}")
    print(f"\n{'reader stall for a published version':42} {'stall ms':>9} {'background fetch ms':>20}")
    print(f"{'plain: Receiver.fetch':42} {results['plain_stall_ms']:9.3f} {'-':>20}")
    for mode in ("pointer", "copy"):
        print(f"{'prefetch: Prefetcher.swap (' + mode + ')':42} {results[f'prefetch_{mode}_stall_ms']:9.3f} "
              f"{results[f'prefetch_{mode}_background_ms']:20.2f}")
    print(json.dumps({"tensors": n_tensors, "bytes": nbytes, "rounds": args.rounds,
                      **{k: round(v, 3) for k, v in results.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
