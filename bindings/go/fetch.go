package tensorhub

/*
#include <stdlib.h>
#include "tensorhub/tensorhub.h"
*/
import "C"

import (
	"context"
	"time"
	"unsafe"
)

// Fetch copies a whole shard of a committed version (a number or Latest) into
// dst, which lists the shard's tensors in published order, pulling the bytes
// straight from the processes holding them. It returns the version delivered.
// With serve, dst's buffers then serve that version to others through the
// returned Replica (nil otherwise); leave them unchanged until it is closed.
//
// ctx's deadline bounds the whole fetch (without one the library's default,
// 6x the client's Timeout, applies); a context already done fails at once,
// and one canceled meanwhile ends the fetch within about 20 ms once its reads
// have started, with ErrCanceled (errors.Is(err, context.Canceled) holds too);
// dst then holds parts of the version.
func (c *Client) Fetch(ctx context.Context, model string, version uint64, shard uint32, dst []Tensor,
	serve bool) (uint64, *Replica, error) {
	return c.fetch(ctx, fetchArgs{model: model, version: version, shard: shard}, dst, serve)
}

// FetchWithStats is Fetch, also returning what the fetch did: bytes, time,
// GB/s, sources, re-plans, and how many bytes came from the publisher and
// from other replicas.
func (c *Client) FetchWithStats(ctx context.Context, model string, version uint64, shard uint32, dst []Tensor,
	serve bool) (uint64, *Replica, SyncStats, error) {
	var stats SyncStats
	args := fetchArgs{model: model, version: version, shard: shard, opts: FetchOptions{Stats: &stats}}
	v, rep, err := c.fetch(ctx, args, dst, serve)
	return v, rep, stats, err
}

// Verify says which chunks a fetch checks against the checksums their
// publisher declared. A chunk that does not match is read again from another
// holder (SyncStats.ChecksumMismatches).
type Verify int

const (
	VerifyOff    Verify = C.TH_VERIFY_OFF
	VerifySample Verify = C.TH_VERIFY_SAMPLE // about one chunk in eight, drawn anew by every fetch
	VerifyAll    Verify = C.TH_VERIFY_ALL
)

// FetchVerified is FetchWithStats with an explicit Verify mode (the other
// fetches use DefaultVerify). FetchWith takes it in FetchOptions.
func (c *Client) FetchVerified(ctx context.Context, model string, version uint64, shard uint32, dst []Tensor,
	serve bool, verify Verify) (uint64, *Replica, SyncStats, error) {
	var stats SyncStats
	args := fetchArgs{model: model, version: version, shard: shard, opts: FetchOptions{Verify: &verify, Stats: &stats}}
	v, rep, err := c.fetch(ctx, args, dst, serve)
	return v, rep, stats, err
}

// FetchOptions are the optional settings of FetchWith and FetchRangesWith;
// the zero value fetches as Fetch does.
type FetchOptions struct {
	// Verify says which chunks are checked against the checksums their
	// publisher declared. nil: DefaultVerify.
	Verify *Verify
	// Progress, when set, is called with the bytes received so far and the
	// bytes the fetch needs: between transfers, at most every
	// ProgressInterval, and once more with done == total when every byte
	// arrived. It runs on the goroutine that fetches, which waits for it, as
	// do readers relaying from this one: return quickly. It must not close
	// the client, fetch into the same buffers, nor end its goroutine
	// (runtime.Goexit, t.Fatal), which would unwind through the library's
	// frames. If it panics, it is not called again, the fetch is canceled
	// (a replica it made is closed), and the fetch call panics with the same
	// value once the library returned.
	Progress func(done, total uint64)
	// ProgressInterval is the least time between two Progress calls, rounded
	// up to whole milliseconds. 0: DefaultProgressInterval.
	ProgressInterval time.Duration
	// Stats, when set, is filled with the fetch's summary on success (see
	// FetchWithStats).
	Stats *SyncStats
}

// FetchWith is Fetch with options: which chunks to verify, a progress
// callback and a SyncStats to fill.
func (c *Client) FetchWith(ctx context.Context, model string, version uint64, shard uint32, dst []Tensor,
	serve bool, opts FetchOptions) (uint64, *Replica, error) {
	return c.fetch(ctx, fetchArgs{model: model, version: version, shard: shard, opts: opts}, dst, serve)
}

// FetchRange copies dst.Len() bytes of one tensor, from byte offset on, into
// dst. A range cannot be served.
func (c *Client) FetchRange(ctx context.Context, model string, version uint64, shard uint32, tensor string,
	offset uint64, dst *Buffer) (uint64, error) {
	if dst == nil {
		return 0, newError(StatusInvalidArg, "FetchRange: dst is nil")
	}
	args := fetchArgs{model: model, version: version, shard: shard, tensor: tensor, offset: offset}
	v, _, err := c.fetch(ctx, args, []Tensor{BytesTensor(tensor, dst)}, false)
	return v, err
}

type fetchArgs struct {
	model   string
	version uint64
	shard   uint32
	tensor  string // "": the whole shard
	offset  uint64
	opts    FetchOptions
}

func (c *Client) fetch(ctx context.Context, a fetchArgs, dst []Tensor, serve bool) (uint64, *Replica, error) {
	run, err := newFetchRun(ctx, a.model, a.version, a.shard, a.opts)
	if err != nil {
		return 0, nil, err
	}
	defer run.close()
	if a.tensor != "" {
		if run.raw.tensor, err = run.cString("tensor", a.tensor); err != nil {
			return 0, nil, err
		}
		run.raw.offset = C.uint64_t(a.offset)
		run.raw.length = C.uint64_t(dst[0].Data.Len())
	}
	ct, err := newCTensors(dst)
	if err != nil {
		return 0, nil, err
	}
	var version C.uint64_t
	var rep *Replica
	err = c.use(func(p *C.th_client) error {
		var out *C.th_replica
		outp := &out
		if !serve {
			outp = nil // NULL asks for no replica
		}
		if err := call(func() C.th_status { return C.th_fetch(p, run.raw, ct.arr, C.size_t(ct.n), &version, outp) }); err != nil {
			return err
		}
		if serve {
			rep = c.adopt(out, ct.bufs)
		}
		return nil
	})
	// A serving replica keeps the buffer references taken for the call.
	ct.free(rep == nil)
	if value, panicked := run.progress.recovered(); panicked {
		if rep != nil {
			_ = rep.Close() // the caller never gets it
		}
		panic(value)
	}
	if err != nil {
		return 0, nil, withContext(ctx, err)
	}
	run.stats.copyTo(a.opts.Stats)
	return uint64(version), rep, nil
}

// fetchRun is a th_fetch_config with what th_fetch and th_fetch_ranges share
// (model, version, shard, ctx's deadline and cancellation, the options) and
// the C memory it points to, which close frees once the C call returned.
type fetchRun struct {
	// In C memory: it holds the progress callback's cgo.Handle as a void *,
	// which is no Go pointer, and a Go pointer cgo passes to C may not lead
	// to Go memory that holds Go pointers (fetchRun does).
	raw      *C.th_fetch_config
	stats    cStats
	progress *progressCall // nil without FetchOptions.Progress
	strings  []*C.char
	stop     func() // ends the watch of ctx, frees the cancellation token
}

func newFetchRun(ctx context.Context, model string, version uint64, shard uint32, opts FetchOptions) (r *fetchRun, err error) {
	timeout, err := deadline(ctx, 0)
	if err != nil {
		return nil, err
	}
	interval, err := millis(opts.ProgressInterval, "progress interval")
	if err != nil {
		return nil, err
	}
	r = &fetchRun{raw: (*C.th_fetch_config)(C.calloc(1, C.sizeof_th_fetch_config)), stop: func() {}}
	if r.raw == nil {
		panic("tensorhub: out of memory")
	}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	C.th_fetch_config_init(r.raw, C.sizeof_th_fetch_config)
	if r.raw.model, err = r.cString("model", model); err != nil {
		return nil, err
	}
	r.raw.version = C.uint64_t(version)
	r.raw.shard = C.uint32_t(shard)
	r.raw.timeout_ms = timeout
	if opts.Verify != nil {
		r.raw.verify = C.th_verify(*opts.Verify)
	}
	r.stats = newCStats(opts.Stats != nil)
	r.raw.stats = r.stats.p
	// A progress callback that panics signals the token, so it needs one
	// even where ctx could not cancel the fetch.
	watch := cancelOnDone
	if opts.Progress != nil {
		watch = newCancelOnDone
	}
	token, stop, err := watch(ctx)
	if err != nil {
		return nil, err
	}
	r.raw.cancel, r.stop = token, stop
	if opts.Progress != nil {
		r.progress = setProgress(r.raw, opts.Progress, interval, token)
	}
	return r, nil
}

// cString is cString for a string of raw, freed by close.
func (r *fetchRun) cString(what, s string) (*C.char, error) {
	cs, err := cString(what, s)
	if err == nil {
		r.strings = append(r.strings, cs)
	}
	return cs, err
}

func (r *fetchRun) close() {
	r.stop()
	r.progress.free()
	r.stats.free()
	for _, s := range r.strings {
		freeString(s)
	}
	C.free(unsafe.Pointer(r.raw))
}
