"""Parts of published tensors to fetch (th_range), for Client.fetch_ranges."""

from __future__ import annotations

import ctypes
import math
from collections.abc import Sequence
from dataclasses import dataclass

from ._common import encode
from ._errors import InvalidArgument
from ._lib import Range as CRange
from ._tensors import TensorLike, View, view_of

__all__ = ["Range", "to_c_ranges"]


@dataclass(frozen=True)
class Range:
    """A strided part of one published tensor, and where it lands.

    ``rows`` runs of ``row_bytes`` bytes: run i starts at byte
    ``offset + i * src_stride`` of the published tensor and lands at byte
    ``dst_offset + i * dst_stride`` of ``into`` (any contiguous, writable array
    or tensor; only its memory is used). A contiguous byte range is rows=1;
    Range.block() builds the range of index block [start, stop) of one
    dimension (a tensor-parallel rank's rows or columns).

    Args:
        tensor: the published tensor's name.
        into: the destination memory.
        offset: byte offset of run 0 inside the published tensor.
        row_bytes: bytes per run; None (rows=1 only): the rest of `into` from dst_offset.
        rows: number of runs.
        src_stride: bytes between run starts in the published tensor (None: row_bytes).
        dst_offset: byte offset of run 0 inside `into`.
        dst_stride: bytes between run starts in `into` (None: row_bytes, packed).
    """

    tensor: str
    into: TensorLike
    offset: int = 0
    row_bytes: int | None = None
    rows: int = 1
    src_stride: int | None = None
    dst_offset: int = 0
    dst_stride: int | None = None

    @classmethod
    def block(cls, tensor: str, shape: Sequence[int], itemsize: int, dim: int, start: int, stop: int,
              into: TensorLike, *, into_shape: Sequence[int] | None = None, into_start: int = 0) -> Range:
        """Indices [start, stop) along dimension `dim` of a row-major tensor
        of `shape` (elements of `itemsize` bytes), landing packed in `into`,
        or, given `into_shape` (the same as `shape` except along `dim`), at
        index `into_start` of dimension `dim` of `into`: how a reader gathers
        several shards' blocks into one tensor."""
        shape = tuple(int(n) for n in shape)
        if not 0 <= dim < len(shape):
            raise InvalidArgument(-1, f"tensor '{tensor}': dimension {dim} of a {len(shape)}-d tensor")
        if not 0 <= start < stop <= shape[dim]:
            raise InvalidArgument(-1, f"tensor '{tensor}': indices [{start}, {stop}) of dimension {dim} of "
                                  f"shape {list(shape)}")
        inner = math.prod(shape[dim + 1:]) * itemsize
        rows = math.prod(shape[:dim])
        row_bytes = (stop - start) * inner
        dst_stride, dst_offset = row_bytes, 0
        if into_shape is not None:
            into_shape = tuple(int(n) for n in into_shape)
            if len(into_shape) != len(shape) or any(a != b for d, (a, b) in enumerate(zip(shape, into_shape))
                                                   if d != dim):
                raise InvalidArgument(-1, f"tensor '{tensor}': destination shape {list(into_shape)} differs from "
                                      f"{list(shape)} outside dimension {dim}")
            if not 0 <= into_start <= into_shape[dim] - (stop - start):
                raise InvalidArgument(-1, f"tensor '{tensor}': {stop - start} indices from {into_start} do not fit "
                                      f"dimension {dim} of the destination ({into_shape[dim]})")
            dst_stride, dst_offset = into_shape[dim] * inner, into_start * inner
        return cls(tensor, into, offset=start * inner, row_bytes=row_bytes, rows=rows,
                   src_stride=shape[dim] * inner, dst_offset=dst_offset, dst_stride=dst_stride)

    @property
    def nbytes(self) -> int:
        """Bytes the range moves (rows x row_bytes); needs row_bytes set."""
        if self.row_bytes is None:
            raise InvalidArgument(-1, f"range of tensor '{self.tensor}': row_bytes is not set")
        return self.rows * self.row_bytes


def to_c_ranges(ranges: Range | Sequence[Range]) -> tuple[ctypes.Array[CRange], list[View]]:
    """The th_range array for `ranges`, and the views keeping their memory alive.
    The library checks the geometry; this checks only what it cannot see
    (that dst_offset lies inside `into`)."""
    if isinstance(ranges, Range):
        ranges = [ranges]
    if not ranges:
        raise InvalidArgument(-1, "no ranges given")
    arr = (CRange * len(ranges))()
    views: list[View] = []
    for i, (c, r) in enumerate(zip(arr, ranges)):
        if not isinstance(r, Range):
            raise InvalidArgument(-1, f"range {i} is a {type(r).__name__}, not a tensorhub.Range")
        view = view_of(r.tensor, r.into, writable=True)
        if not 0 <= r.dst_offset <= view.nbytes:
            raise InvalidArgument(-1, f"range {i} of tensor '{r.tensor}': dst_offset {r.dst_offset} is outside "
                                  f"its destination of {view.nbytes} bytes")
        row_bytes = r.row_bytes
        if row_bytes is None:
            if r.rows != 1:
                raise InvalidArgument(-1, f"range {i} of tensor '{r.tensor}': row_bytes is needed with rows={r.rows}")
            row_bytes = view.nbytes - r.dst_offset
        c.tensor = encode(r.tensor, "tensor")
        c.offset = _u64(r.offset, i, r.tensor, "offset")
        c.row_bytes = _u64(row_bytes, i, r.tensor, "row_bytes")
        c.rows = _u64(r.rows, i, r.tensor, "rows")
        c.src_stride = _u64(row_bytes if r.src_stride is None else r.src_stride, i, r.tensor, "src_stride")
        c.dst = (view.data + r.dst_offset) or None
        c.dst_stride = _u64(0 if r.dst_stride is None else r.dst_stride, i, r.tensor, "dst_stride")
        c.dst_bytes = view.nbytes - r.dst_offset
        c.mem_kind = int(view.mem_kind)
        c.device = view.device
        views.append(view)
    return arr, views


def _u64(value: int, i: int, tensor: str, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**64:
        raise InvalidArgument(-1, f"range {i} of tensor '{tensor}': {what} must be an integer in [0, 2^64), "
                              f"got {value!r}")
    return value
