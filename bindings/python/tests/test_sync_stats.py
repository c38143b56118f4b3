"""Each fetch and publish leaves a summary (Client.last_sync_stats), and a
fetch reports progress through a callback."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import tensorhub
from conftest import connect, empty_like, weights

KEYS = {"op", "model", "shard", "version", "bytes", "seconds", "gbps", "sources", "replans", "failed_sources",
        "chunks", "bytes_from_publisher", "bytes_from_replicas", "checksum_mismatches",
        "bytes_one_sided", "bytes_waited", "bytes_kept", "server_seconds"}


def nbytes(state: dict[str, np.ndarray]) -> int:
    return sum(a.nbytes for a in state.values())


def test_publish_and_fetch_leave_a_plain_dict(pub: tensorhub.Client, reader: tensorhub.Client) -> None:
    assert reader.last_sync_stats is None
    w = weights(1)
    pub.publish("m", 4, w, chunk_bytes=64 << 10)
    p = pub.last_sync_stats
    assert p is not None and set(p) == KEYS
    assert (p["op"], p["model"], p["version"], p["bytes"], p["sources"], p["gbps"]) == ("publish", "m", 4, nbytes(w), 0, 0.0)

    assert reader.fetch("m", into=empty_like(w), serve=False) == 4
    s = reader.last_sync_stats
    assert s is not None and set(s) == KEYS
    assert all(isinstance(v, (int, float, str)) for v in s.values())  # ready for wandb.log
    assert (s["op"], s["version"], s["bytes"], s["sources"]) == ("fetch", 4, nbytes(w), 1)
    assert s["bytes_from_publisher"] == nbytes(w) and s["bytes_from_replicas"] == 0
    # One peer, one read path: every byte one-sided (shared memory on a UCX
    # >= 1.19) or none (tcp, older UCX). The C++ integration tests check which.
    assert s["bytes_one_sided"] in (0, nbytes(w)) and p["bytes_one_sided"] == 0
    # Read from a complete replica: nothing to wait for.
    assert s["bytes_waited"] == 0 and p["bytes_waited"] == 0
    # Nothing changed under the reader: nothing had to be kept.
    assert s["bytes_kept"] == 0 and p["bytes_kept"] == 0
    assert s["chunks"] >= 1 and s["seconds"] > 0
    assert s["gbps"] == pytest.approx(s["bytes"] / s["seconds"] / 1e9)
    # The plan and the end report, the declaration: round trips to the server.
    assert 0 < s["server_seconds"] < s["seconds"] and 0 < p["server_seconds"] <= p["seconds"]


def test_the_summary_is_per_thread(pub: tensorhub.Client, reader: tensorhub.Client) -> None:
    pub.publish("m", 1, weights(1))
    seen: list[object] = []
    t = threading.Thread(target=lambda: seen.append(reader.last_sync_stats))
    reader.fetch("m", into=empty_like(weights(1)), serve=False)
    t.start()
    t.join()
    assert seen == [None] and reader.last_sync_stats is not None


def test_progress_reaches_the_total(pub: tensorhub.Client, reader: tensorhub.Client) -> None:
    w = weights(2, sizes=(300000,))
    pub.publish("m", 1, w, chunk_bytes=64 << 10)
    calls: list[tuple[int, int]] = []
    reader.fetch("m", into=empty_like(w), progress=lambda done, total: calls.append((done, total)))
    assert calls and calls[-1] == (nbytes(w), nbytes(w))
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_an_exception_in_the_last_callback_is_raised_after_the_fetch(server: tensorhub.Server,
                                                                    pub: tensorhub.Client) -> None:
    w = weights(3)
    pub.publish("m", 1, w)
    calls = []

    def boom(done: int, total: int) -> None:
        calls.append(done)
        if done == total:
            raise KeyError("from the callback")

    with connect(server, "r2") as reader:
        mine = empty_like(w)
        with pytest.raises(KeyError, match="from the callback"):
            reader.fetch("m", into=mine, progress=boom)
        assert calls[-1] == nbytes(w)
        # The fetch itself completed: the bytes are there, and so is its summary.
        np.testing.assert_array_equal(mine["layers.1.weight"], w["layers.1.weight"])
        assert reader.last_sync_stats is not None and reader.last_sync_stats["version"] == 1


@pytest.mark.parametrize("serve", [False, True])
def test_an_exception_in_the_callback_ends_the_fetch(server: tensorhub.Server, pub: tensorhub.Client,
                                                     serve: bool) -> None:
    # 64 chunks read one read at a time: the first call comes after the
    # first read, and once the fetch is canceled at most one more lands (a
    # read covers up to about 2 MiB on shared memory).
    w = {"w": np.arange(1 << 20, dtype=np.float32)}  # 4 MiB
    pub.publish("m", 1, w, chunk_bytes=64 << 10)
    calls = []
    shutdown = tensorhub.Cancel()

    def boom(done: int, total: int) -> None:
        calls.append(done)
        raise KeyError("from the callback")

    with connect(server, "r-stop", max_inflight=1) as reader:
        mine = empty_like(w)
        with pytest.raises(KeyError, match="from the callback") as raised:
            reader.fetch("m", into=mine, progress=boom, progress_interval=0, serve=serve, cancel=shutdown)
        assert len(calls) == 1 and calls[0] < nbytes(w) // 2, calls
        # The callback's exception ended the fetch, as a cancel would have.
        assert isinstance(raised.value.__context__, tensorhub.Canceled), repr(raised.value.__context__)
        assert not mine["w"][-(16 << 10):].any(), "the fetch ran on after the callback raised"
        assert not shutdown.canceled  # the caller's token is left alone
        # Nothing serves the canceled fetch's buffers; the client fetches on.
        assert reader.fetch("m", into=mine, serve=serve) == 1
        np.testing.assert_array_equal(mine["w"], w["w"])


def test_progress_interval_zero_reports_between_chunks(server: tensorhub.Server, pub: tensorhub.Client) -> None:
    # One read in flight and 20 chunks: with no minimum interval, the
    # callback runs before the last chunk arrives, on the fetching thread.
    w = weights(4, sizes=(320000,))
    pub.publish("m", 1, w, chunk_bytes=64 << 10)
    calls: list[tuple[int, int]] = []
    with connect(server, "r-interval", max_inflight=1) as reader:
        reader.fetch("m", into=empty_like(w), progress=lambda d, t: calls.append((d, t)), progress_interval=0)
    total = nbytes(w)
    assert calls[-1] == (total, total)
    assert any(0 < d < total for d, _ in calls), calls
    with pytest.raises(tensorhub.InvalidArgument, match="progress_interval"):
        pub.fetch("m", into=empty_like(w), progress=lambda d, t: None, progress_interval=-1)
