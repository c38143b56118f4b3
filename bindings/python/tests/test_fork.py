"""A process forked (multiprocessing's "fork" start method) from one that used
tensorhub gets a clear error, never a hang or an NNG panic; the parent goes on."""

from __future__ import annotations

import multiprocessing as mp
import queue

import numpy as np

import tensorhub
from conftest import connect


def _child(url: str, inherited: tensorhub.Client, out: mp.Queue) -> None:
    results = []
    try:
        tensorhub.Client(url, name="forked", timeout=3.0)
        results.append("created")
    except tensorhub.Unsupported as e:
        results.append(f"unsupported: {e}")
    except Exception as e:  # any other outcome is a failure the parent reports
        results.append(f"{type(e).__name__}: {e}")
    try:
        inherited.resolve("m")
        results.append("inherited client answered")
    except tensorhub.Unsupported as e:
        results.append(f"unsupported: {e}")
    except Exception as e:
        results.append(f"{type(e).__name__}: {e}")
    inherited.close()  # must not wait for the parent's threads
    results.append("closed")
    out.put(results)


def test_a_forked_child_gets_a_clear_error_and_the_parent_goes_on(server: tensorhub.Server) -> None:
    with connect(server, "parent") as parent:
        weights = {"w": np.arange(256, dtype=np.float32)}
        replica = parent.publish("m", 1, weights)
        ctx = mp.get_context("fork")
        out: mp.Queue = ctx.Queue()
        child = ctx.Process(target=_child, args=(server.url, parent, out))
        child.start()
        try:
            results = out.get(timeout=30)
        except queue.Empty:
            child.kill()
            raise AssertionError("the forked child hung")
        child.join(timeout=30)
        assert child.exitcode == 0, f"the forked child ended with {child.exitcode}"
        assert len(results) == 3, results
        for r in results[:2]:
            assert r.startswith("unsupported:"), results
            assert "fork" in r and "spawn" in r, r
        assert results[2] == "closed"
        # The parent's client, server and replica still work.
        dst = {"w": np.zeros(256, np.float32)}
        with connect(server, "after") as reader:
            assert reader.fetch("m", into=dst) == 1
        assert np.array_equal(dst["w"], weights["w"])
        replica.release()
