package tensorhub

/*
#include "tensorhub/tensorhub.h"
*/
import "C"

// PublishConfig names what is published. Zero NumShards and ChunkBytes keep
// the library defaults (DefaultNumShards, DefaultChunkBytes).
type PublishConfig struct {
	Model      string // required, 1..255 bytes
	Version    uint64 // chosen by the publisher, strictly increasing per model
	Shard      uint32
	NumShards  uint32
	ChunkBytes uint64 // unit of progress, checksums and reads; must agree across shards
	// NoChecksums skips the checksum of every chunk that readers check
	// (computed by default: DefaultChecksums).
	NoChecksums bool
}

// Publish declares that this process holds cfg's shard in tensors and serves
// it from their buffers (nothing is copied) until the Replica is closed. The
// version becomes visible once every shard is published.
func (c *Client) Publish(cfg PublishConfig, tensors []Tensor) (*Replica, error) {
	return c.publish(cfg, tensors, nil)
}

// PublishWithStats is Publish, also returning its summary (bytes and chunks
// declared, time taken).
func (c *Client) PublishWithStats(cfg PublishConfig, tensors []Tensor) (*Replica, SyncStats, error) {
	var stats SyncStats
	rep, err := c.publish(cfg, tensors, &stats)
	return rep, stats, err
}

// publish fills stats, when not nil, on success.
func (c *Client) publish(cfg PublishConfig, tensors []Tensor, stats *SyncStats) (*Replica, error) {
	model, err := cString("model", cfg.Model)
	if err != nil {
		return nil, err
	}
	defer freeString(model)
	var raw C.th_publish_config
	C.th_publish_config_init(&raw, C.sizeof_th_publish_config)
	raw.model = model
	raw.version = C.uint64_t(cfg.Version)
	raw.shard = C.uint32_t(cfg.Shard)
	if cfg.NumShards != 0 {
		raw.num_shards = C.uint32_t(cfg.NumShards)
	}
	if cfg.ChunkBytes != 0 {
		raw.chunk_bytes = C.uint64_t(cfg.ChunkBytes)
	}
	if cfg.NoChecksums {
		raw.checksums = 0
	}
	cs := newCStats(stats != nil)
	defer cs.free()
	raw.stats = cs.p
	ct, err := newCTensors(tensors)
	if err != nil {
		return nil, err
	}
	var rep *Replica
	err = c.use(func(p *C.th_client) error {
		var out *C.th_replica
		if err := call(func() C.th_status { return C.th_publish(p, &raw, ct.arr, C.size_t(ct.n), &out) }); err != nil {
			return err
		}
		rep = c.adopt(out, ct.bufs)
		return nil
	})
	// On success the replica keeps the buffer references taken for the call.
	ct.free(err != nil)
	if err == nil {
		cs.copyTo(stats)
	}
	return rep, err
}
