package tensorhub

/*
#include <stdlib.h>
#include "tensorhub/tensorhub.h"
*/
import "C"

import "unsafe"

// SyncStats summarises one fetch or publish, for logs and experiment trackers
// (th_sync_stats).
type SyncStats struct {
	Version            uint64  // the version fetched or published
	Bytes              uint64  // bytes fetched; for a publish, bytes declared
	Seconds            float64 // wall time of the call
	GBps               float64 // Bytes / Seconds / 1e9 for a fetch; 0 for a publish
	Sources            uint32  // distinct holders the bytes came from (0 for a publish)
	Replans            uint32  // plans asked for after the first: a source failed, changed or stalled
	FailedSources      uint32  // sources dropped during the fetch
	Chunks             uint32  // chunks fetched (publish: chunks declared)
	BytesFromPublisher uint64  // of Bytes, read from a publisher's replica
	BytesFromReplicas  uint64  // of Bytes, read from readers' replicas or spilled copies
	// ChecksumMismatches counts chunks that did not match their publisher's
	// checksum: read again from another holder, whose worker was reported.
	ChecksumMismatches uint32
	// BytesOneSided is how many of Bytes were read with one-sided GETs (RDMA,
	// shared memory, cuda_ipc): no CPU of the holder touched them.
	BytesOneSided uint64
	// BytesWaited is how many of Bytes were asked for from a reader still
	// receiving them and sent by it the moment it had them (waiting reads: a
	// chain of readers over tcp).
	BytesWaited uint64
	// BytesKept is how many of Bytes came from a source whose replica then
	// changed (a mutation or release) and were kept: its holder let them
	// finish before the change (the active-message path). 0 for a publish.
	BytesKept uint64
	// ServerSeconds is how much of Seconds the call waited for the metadata
	// server's replies: a fetch's plan and end report, a publish's
	// declaration (a fixed cost per call, whatever its size).
	ServerSeconds float64
}

// cStats is a th_sync_stats the library fills. It lives in C memory: a config
// struct passed to C may not point into Go memory.
type cStats struct{ p *C.th_sync_stats }

// newCStats returns an initialised th_sync_stats when want, else a nil one
// (no stats asked for); free releases it.
func newCStats(want bool) cStats {
	if !want {
		return cStats{}
	}
	p := (*C.th_sync_stats)(C.malloc(C.sizeof_th_sync_stats))
	C.th_sync_stats_init(p, C.sizeof_th_sync_stats)
	return cStats{p}
}

func (s cStats) free() {
	if s.p != nil {
		C.free(unsafe.Pointer(s.p))
	}
}

// copyTo fills out (when both exist) with what the library reported.
func (s cStats) copyTo(out *SyncStats) {
	if s.p == nil || out == nil {
		return
	}
	*out = SyncStats{
		Version:            uint64(s.p.version),
		Bytes:              uint64(s.p.bytes),
		Seconds:            float64(s.p.seconds),
		GBps:               float64(s.p.gbps),
		Sources:            uint32(s.p.sources),
		Replans:            uint32(s.p.replans),
		FailedSources:      uint32(s.p.failed_sources),
		Chunks:             uint32(s.p.chunks),
		BytesFromPublisher: uint64(s.p.bytes_from_publisher),
		BytesFromReplicas:  uint64(s.p.bytes_from_replicas),
		ChecksumMismatches: uint32(s.p.checksum_mismatches),
		BytesOneSided:      uint64(s.p.bytes_one_sided),
		BytesWaited:        uint64(s.p.bytes_waited),
		BytesKept:          uint64(s.p.bytes_kept),
		ServerSeconds:      float64(s.p.server_seconds),
	}
}
