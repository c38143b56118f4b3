"""Client.fetch_ranges: parts of published tensors (byte ranges, row and
column blocks) in one fetch, only those bytes moved."""

from __future__ import annotations

import numpy as np
import pytest

import tensorhub
from tensorhub import Range


def full(rows: int = 48, cols: int = 3000) -> np.ndarray:
    return np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)


def test_column_block_in_one_fetch(pub: tensorhub.Client, reader: tensorhub.Client) -> None:
    w = full()
    pub.publish("m", 3, {"norm": np.ones(7, np.float32), "w": w}, chunk_bytes=4096)
    mine = np.zeros((48, 500), np.float32)
    r = Range.block("w", w.shape, 4, dim=1, start=1000, stop=1500, into=mine)
    assert (r.rows, r.row_bytes, r.src_stride, r.offset) == (48, 2000, 12000, 4000)
    assert reader.fetch_ranges("m", r) == 3
    np.testing.assert_array_equal(mine, w[:, 1000:1500])
    s = reader.last_sync_stats
    assert s is not None and s["bytes"] == mine.nbytes and s["version"] == 3
    # 48 rows of 12000 bytes in 4096-byte chunks: each row's 2000 bytes touch one or two chunks.
    assert s["chunks"] < (w.nbytes + 28) // 4096


def test_several_ranges_and_tensors_in_one_fetch(pub: tensorhub.Client, reader: tensorhub.Client) -> None:
    a, b = full(16, 64), np.arange(1000, dtype=np.int64)
    pub.publish("m", 1, {"a": a, "b": b}, chunk_bytes=4096)
    rows = np.zeros((4, 64), np.float32)
    col = np.zeros(16, np.float32)
    tail = np.zeros(10, np.int64)
    got = reader.fetch_ranges("m", [Range.block("a", a.shape, 4, 0, 4, 8, rows),
                                    Range.block("a", a.shape, 4, 1, 63, 64, col),
                                    Range("b", tail, offset=990 * 8)])
    assert got == 1
    np.testing.assert_array_equal(rows, a[4:8])
    np.testing.assert_array_equal(col, a[:, 63])
    np.testing.assert_array_equal(tail, b[990:])
    assert reader.last_sync_stats["bytes"] == rows.nbytes + col.nbytes + tail.nbytes  # type: ignore[index]


def test_gather_shards_into_one_tensor(pub: tensorhub.Client, reader: tensorhub.Client) -> None:
    w = full(8, 100)
    halves = [np.ascontiguousarray(w[:, :50]), np.ascontiguousarray(w[:, 50:])]
    replicas = [pub.publish("tp", 1, {"w": h}, shard=s, num_shards=2) for s, h in enumerate(halves)]
    out = np.zeros_like(w)
    for s in range(2):
        reader.fetch_ranges("tp", Range.block("w", (8, 50), 4, 1, 0, 50, out, into_shape=(8, 100),
                                              into_start=50 * s), shard=s)
    np.testing.assert_array_equal(out, w)
    for r in replicas:
        r.release()


def test_errors_name_the_range_and_tensor(pub: tensorhub.Client, reader: tensorhub.Client) -> None:
    w = full(8, 100)
    pub.publish("m", 1, {"w": w})
    dst = np.zeros(800, np.float32)
    with pytest.raises(tensorhub.VersionNotFound, match="range 1: the shard has no tensor named 'nope'"):
        reader.fetch_ranges("m", [Range("w", dst[:10]), Range("nope", dst)])
    with pytest.raises(tensorhub.InvalidArgument, match="outside tensor 'w' of 3200 bytes"):
        reader.fetch_ranges("m", Range("w", dst, offset=380, row_bytes=40, rows=8, src_stride=400))
    with pytest.raises(tensorhub.InvalidArgument, match="range 0 of tensor 'w': the destination holds 4 bytes"):
        reader.fetch_ranges("m", Range("w", np.zeros(1, np.float32), row_bytes=8, rows=2, src_stride=400))
    with pytest.raises(tensorhub.InvalidArgument, match="row_bytes is needed"):
        reader.fetch_ranges("m", Range("w", dst, rows=2))
    with pytest.raises(tensorhub.InvalidArgument, match="dst_offset 9999 is outside"):
        reader.fetch_ranges("m", Range("w", dst, dst_offset=9999))
    with pytest.raises(tensorhub.InvalidArgument, match="no ranges given"):
        reader.fetch_ranges("m", [])
    with pytest.raises(tensorhub.InvalidArgument, match="indices \\[90, 110\\) of dimension 1"):
        Range.block("w", w.shape, 4, 1, 90, 110, dst)


def test_progress_counts_the_ranges(pub: tensorhub.Client, reader: tensorhub.Client) -> None:
    w = full(64, 1000)
    pub.publish("m", 1, {"w": w}, chunk_bytes=4096)
    mine = np.zeros((64, 10), np.float32)
    calls: list[tuple[int, int]] = []
    reader.fetch_ranges("m", Range.block("w", w.shape, 4, 1, 0, 10, mine), progress=lambda d, t: calls.append((d, t)),
                        progress_interval=0)
    assert calls and calls[-1] == (mine.nbytes, mine.nbytes)
