package tensorhub

/*
#include "tensorhub/tensorhub.h"
*/
import "C"

import "context"

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
	return c.fetch(ctx, fetchArgs{model: model, version: version, shard: shard}, dst, serve, nil)
}

// FetchWithStats is Fetch, also returning what the fetch did: bytes, time,
// GB/s, sources, re-plans, and how many bytes came from the publisher and
// from other replicas.
func (c *Client) FetchWithStats(ctx context.Context, model string, version uint64, shard uint32, dst []Tensor,
	serve bool) (uint64, *Replica, SyncStats, error) {
	var stats SyncStats
	v, rep, err := c.fetch(ctx, fetchArgs{model: model, version: version, shard: shard}, dst, serve, &stats)
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
// fetches use DefaultVerify).
func (c *Client) FetchVerified(ctx context.Context, model string, version uint64, shard uint32, dst []Tensor,
	serve bool, verify Verify) (uint64, *Replica, SyncStats, error) {
	var stats SyncStats
	args := fetchArgs{model: model, version: version, shard: shard, verify: &verify}
	v, rep, err := c.fetch(ctx, args, dst, serve, &stats)
	return v, rep, stats, err
}

// FetchRange copies dst.Len() bytes of one tensor, from byte offset on, into
// dst. A range cannot be served.
func (c *Client) FetchRange(ctx context.Context, model string, version uint64, shard uint32, tensor string,
	offset uint64, dst *Buffer) (uint64, error) {
	if dst == nil {
		return 0, newError(StatusInvalidArg, "FetchRange: dst is nil")
	}
	args := fetchArgs{model: model, version: version, shard: shard, tensor: tensor, offset: offset}
	v, _, err := c.fetch(ctx, args, []Tensor{BytesTensor(tensor, dst)}, false, nil)
	return v, err
}

type fetchArgs struct {
	model   string
	version uint64
	shard   uint32
	tensor  string // "": the whole shard
	offset  uint64
	verify  *Verify // nil: the library's default
}

// fetch fills stats, when not nil, on success.
func (c *Client) fetch(ctx context.Context, a fetchArgs, dst []Tensor, serve bool, stats *SyncStats) (uint64, *Replica, error) {
	timeout, err := deadline(ctx, 0)
	if err != nil {
		return 0, nil, err
	}
	var raw C.th_fetch_config
	C.th_fetch_config_init(&raw, C.sizeof_th_fetch_config)
	if raw.model, err = cString("model", a.model); err != nil {
		return 0, nil, err
	}
	defer freeString(raw.model)
	if a.tensor != "" {
		if raw.tensor, err = cString("tensor", a.tensor); err != nil {
			return 0, nil, err
		}
		defer freeString(raw.tensor)
		raw.offset = C.uint64_t(a.offset)
		raw.length = C.uint64_t(dst[0].Data.Len())
	}
	if a.verify != nil {
		raw.verify = C.th_verify(*a.verify)
	}
	raw.version = C.uint64_t(a.version)
	raw.shard = C.uint32_t(a.shard)
	raw.timeout_ms = timeout
	cs := newCStats(stats != nil)
	defer cs.free()
	raw.stats = cs.p
	token, stop, err := cancelOnDone(ctx)
	if err != nil {
		return 0, nil, err
	}
	defer stop()
	raw.cancel = token

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
		if err := call(func() C.th_status { return C.th_fetch(p, &raw, ct.arr, C.size_t(ct.n), &version, outp) }); err != nil {
			return err
		}
		if serve {
			rep = c.adopt(out, ct.bufs)
		}
		return nil
	})
	// A serving replica keeps the buffer references taken for the call.
	ct.free(rep == nil)
	if err != nil {
		return 0, nil, withContext(ctx, err)
	}
	cs.copyTo(stats)
	return uint64(version), rep, nil
}
