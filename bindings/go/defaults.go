package tensorhub

/*
#include "tensorhub/tensorhub.h"
*/
import "C"

import "time"

// The library's defaults: what a zero field of a config stands for. They are
// the header's TH_DEFAULT_* (tensorhub.h), read by cgo, never written here.
const (
	DefaultListenURL           string        = C.TH_DEFAULT_LISTEN_URL
	DefaultLease               time.Duration = C.TH_DEFAULT_LEASE_MS * time.Millisecond
	DefaultMaxReadersPerSource uint32        = C.TH_DEFAULT_MAX_READERS_PER_SOURCE
	DefaultEtcdPrefix          string        = C.TH_DEFAULT_ETCD_PREFIX
	DefaultEtcdLease           time.Duration = C.TH_DEFAULT_ETCD_LEASE_MS * time.Millisecond
	DefaultStripes             uint32        = C.TH_DEFAULT_STRIPES
	DefaultTimeout             time.Duration = C.TH_DEFAULT_TIMEOUT_MS * time.Millisecond
	DefaultHeartbeat           time.Duration = C.TH_DEFAULT_HEARTBEAT_MS * time.Millisecond
	DefaultChunkTimeout        time.Duration = C.TH_DEFAULT_CHUNK_TIMEOUT_MS * time.Millisecond
	DefaultMaxInflight         uint32        = C.TH_DEFAULT_MAX_INFLIGHT
	DefaultRetention           Retention     = C.TH_DEFAULT_RETENTION
	DefaultMutationWait        time.Duration = C.TH_DEFAULT_MUTATION_WAIT_MS * time.Millisecond
	DefaultSpillPoolBytes      uint64        = C.TH_DEFAULT_SPILL_POOL_BYTES
	DefaultSpillAhead          bool          = C.TH_DEFAULT_SPILL_AHEAD != 0
	DefaultCopyThreads         uint32        = C.TH_DEFAULT_COPY_THREADS
	DefaultNumShards           uint32        = C.TH_DEFAULT_NUM_SHARDS
	DefaultChunkBytes          uint64        = C.TH_DEFAULT_CHUNK_BYTES
	DefaultChecksums           bool          = C.TH_DEFAULT_CHECKSUMS != 0
	DefaultVerify              Verify        = C.TH_DEFAULT_VERIFY
	DefaultProgressInterval    time.Duration = C.TH_DEFAULT_PROGRESS_INTERVAL_MS * time.Millisecond
)

// fetchDefaults are the settings of FetchOptions that have a library
// default (FetchOptions itself holds a function, so it cannot be compared).
type fetchDefaults struct {
	Verify           Verify
	ProgressInterval time.Duration
}

// libraryDefaults reads back what the loaded library's th_*_config_init
// fill in, for the test that holds them to the constants above.
func libraryDefaults() (ServerConfig, ClientConfig, PublishConfig, fetchDefaults) {
	var s C.th_server_config
	C.th_server_config_init(&s, C.sizeof_th_server_config)
	var c C.th_client_config
	C.th_client_config_init(&c, C.sizeof_th_client_config)
	var p C.th_publish_config
	C.th_publish_config_init(&p, C.sizeof_th_publish_config)
	var f C.th_fetch_config
	C.th_fetch_config_init(&f, C.sizeof_th_fetch_config)
	ms := func(v C.uint32_t) time.Duration { return time.Duration(v) * time.Millisecond }
	return ServerConfig{
			ListenURL:           C.GoString(s.listen_url),
			Lease:               ms(s.lease_ms),
			MaxReadersPerSource: uint32(s.max_readers_per_source),
			Stripes:             uint32(s.stripes),
			EtcdPrefix:          C.GoString(s.etcd_prefix),
			EtcdLease:           ms(s.etcd_lease_ms),
		}, ClientConfig{
			Timeout:        ms(c.timeout_ms),
			Heartbeat:      ms(c.heartbeat_ms),
			ChunkTimeout:   ms(c.chunk_timeout_ms),
			MaxInflight:    uint32(c.max_inflight),
			Retention:      Retention(c.retention),
			MutationWait:   ms(c.mutation_wait_ms),
			SpillPoolBytes: uint64(c.spill_pool_bytes),
			SpillAhead:     c.spill_ahead != 0,
			CopyThreads:    uint32(c.copy_threads),
		}, PublishConfig{
			NumShards:   uint32(p.num_shards),
			ChunkBytes:  uint64(p.chunk_bytes),
			NoChecksums: p.checksums == 0,
		}, fetchDefaults{
			Verify:           Verify(f.verify),
			ProgressInterval: ms(f.progress_interval_ms),
		}
}
