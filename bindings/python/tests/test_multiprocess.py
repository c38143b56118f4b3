"""A publisher process and two reader processes: the bytes arrive intact and
the server saw each reader served by the publisher or by the other reader."""

from __future__ import annotations

import math
import multiprocessing

import _workers

import tensorhub


def test_publisher_and_two_readers_in_separate_processes() -> None:
    ctx = multiprocessing.get_context("spawn")
    ready, results, stop = ctx.Queue(), ctx.Queue(), ctx.Event()
    version = 3
    # One reader per source, so that the second reader is sent to the first
    # one when it already holds the version.
    with tensorhub.Server(max_readers_per_source=1) as server:
        procs = [ctx.Process(target=_workers.publisher, args=(server.url, version, ready, stop))]
        try:
            procs[0].start()
            publisher_id = ready.get(timeout=30)
            readers: dict[int, int] = {}
            for index in (1, 2):  # one after the other: reader 2 may read from reader 1
                procs.append(ctx.Process(target=_workers.reader, args=(server.url, index, version, results, stop)))
                procs[-1].start()
                got_index, worker_id, ok = results.get(timeout=30)
                assert ok, f"reader {got_index} received wrong bytes"
                readers[got_index] = worker_id

            status = tensorhub.server_status(server.url)
            (model,) = [m for m in status["models"] if m["name"] == _workers.MODEL]
            (ver,) = [v for v in model["versions"] if v["version"] == version]
            sources = {w: {r["source"] for r in ver["reads"] if r["reader"] == w} for w in readers.values()}
            for worker, got_from in sources.items():
                others = {publisher_id} | (set(readers.values()) - {worker})
                assert got_from and got_from <= others, (worker, got_from, others)
            print("reads:", [(r["reader"], r["source"], r["bytes"]) for r in ver["reads"]], "publisher:", publisher_id)
            nbytes = sum(r["bytes"] for r in ver["reads"])
            assert nbytes >= 2 * sum(4 * math.prod(s) for s in _workers.SHAPES.values())
            # Every process holds a complete replica.
            holders = {r["worker_id"] for s in ver["shards"] for r in s["replicas"] if r["complete"]}
            assert holders == {publisher_id, *readers.values()}
        finally:
            stop.set()
            for p in procs:
                p.join(30)
                if p.is_alive():
                    p.kill()
        assert [p.exitcode for p in procs] == [0, 0, 0]

