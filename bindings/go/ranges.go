package tensorhub

/*
#include <stdlib.h>
#include "tensorhub/tensorhub.h"
*/
import "C"

import (
	"context"
	"fmt"
	"unsafe"
)

// Range is a strided part of one published tensor and where it lands
// (th_range): Rows runs of RowBytes bytes, run i read from byte
// Offset + i*SrcStride of the tensor into byte DstOffset + i*DstStride of Dst.
// Rows 0 counts as 1 (a contiguous byte range, RowBytes 0: the rest of Dst);
// DstStride 0 packs the runs. A column block [c0, c1) of a row-major [R, C]
// matrix of e-byte elements is Offset c0*e, RowBytes (c1-c0)*e, Rows R,
// SrcStride C*e.
type Range struct {
	Tensor    string
	Offset    uint64
	RowBytes  uint64
	Rows      uint64
	SrcStride uint64
	Dst       *Buffer
	DstOffset uint64
	DstStride uint64
}

// FetchRanges fetches only ranges of one shard of a committed version (a
// number or Latest) in one fetch: one plan, then reads of just those bytes,
// each landing in its range's buffer. It returns the version delivered and
// the fetch's summary (Bytes counts the ranges' bytes). The buffers do not
// serve others. ctx's deadline bounds the fetch, as for Fetch.
func (c *Client) FetchRanges(ctx context.Context, model string, version uint64, shard uint32,
	ranges []Range) (uint64, SyncStats, error) {
	var stats SyncStats
	v, err := c.FetchRangesWith(ctx, model, version, shard, ranges, FetchOptions{Stats: &stats})
	return v, stats, err
}

// FetchRangesWith is FetchRanges with options (FetchWith's): which chunks
// to verify (a chunk a range covers only in part is not checked), a progress
// callback, whose total is the ranges' bytes, and a SyncStats to fill.
func (c *Client) FetchRangesWith(ctx context.Context, model string, version uint64, shard uint32,
	ranges []Range, opts FetchOptions) (uint64, error) {
	if len(ranges) == 0 {
		return 0, newError(StatusInvalidArg, "FetchRanges: no ranges given")
	}
	run, err := newFetchRun(ctx, model, version, shard, opts)
	if err != nil {
		return 0, err
	}
	defer run.close()

	// The array lives in C memory: it holds pointers (names, buffers).
	arr := (*C.th_range)(C.calloc(C.size_t(len(ranges)), C.size_t(unsafe.Sizeof(C.th_range{}))))
	if arr == nil {
		panic("tensorhub: out of memory")
	}
	raws := unsafe.Slice(arr, len(ranges))
	var bufs []*Buffer
	defer func() {
		for _, r := range raws {
			C.free(unsafe.Pointer(r.tensor)) // NULL for entries not filled
		}
		C.free(unsafe.Pointer(arr))
		releaseAll(bufs)
	}()
	for i, r := range ranges {
		if r.Dst == nil {
			return 0, newError(StatusInvalidArg, fmt.Sprintf("range %d of tensor '%s' has no buffer", i, r.Tensor))
		}
		if raws[i].tensor, err = cString("tensor", r.Tensor); err != nil {
			return 0, err
		}
		ptr, err := r.Dst.acquire()
		if err != nil {
			return 0, newError(StatusInvalidArg, fmt.Sprintf("range %d of tensor '%s': %s", i, r.Tensor, err.(*Error).msg))
		}
		bufs = append(bufs, r.Dst)
		n := uint64(r.Dst.Len())
		if r.DstOffset > n {
			return 0, newError(StatusInvalidArg,
				fmt.Sprintf("range %d of tensor '%s': DstOffset %d is outside its %d-byte buffer", i, r.Tensor, r.DstOffset, n))
		}
		rows, rowBytes := r.Rows, r.RowBytes
		if rows == 0 {
			rows = 1
		}
		if rows == 1 && rowBytes == 0 {
			rowBytes = n - r.DstOffset
		}
		raws[i].offset = C.uint64_t(r.Offset)
		raws[i].row_bytes = C.uint64_t(rowBytes)
		raws[i].rows = C.uint64_t(rows)
		raws[i].src_stride = C.uint64_t(r.SrcStride)
		raws[i].dst = unsafe.Add(ptr, r.DstOffset)
		raws[i].dst_stride = C.uint64_t(r.DstStride)
		raws[i].dst_bytes = C.uint64_t(n - r.DstOffset)
		raws[i].mem_kind = C.TH_MEM_HOST
	}
	var got C.uint64_t
	err = c.use(func(p *C.th_client) error {
		return call(func() C.th_status { return C.th_fetch_ranges(p, run.raw, arr, C.size_t(len(ranges)), &got) })
	})
	if value, panicked := run.progress.recovered(); panicked {
		panic(value)
	}
	if err != nil {
		return 0, withContext(ctx, err)
	}
	run.stats.copyTo(opts.Stats)
	return uint64(got), nil
}
