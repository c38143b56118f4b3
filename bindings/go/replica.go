package tensorhub

/*
#include "tensorhub/tensorhub.h"
*/
import "C"

import "sync"

// Replica is a version this process serves from its buffers, until Close.
// It holds a reference on each buffer, so Buffer.Close fails until then.
type Replica struct {
	mu      sync.Mutex
	ptr     *C.th_replica
	client  *Client
	bufs    []*Buffer
	version uint64
}

// adopt wraps a replica handle the client just created. The caller holds
// c.mu, so Close cannot run between the C call and the tracking.
func (c *Client) adopt(ptr *C.th_replica, bufs []*Buffer) *Replica {
	r := &Replica{ptr: ptr, client: c, bufs: bufs, version: uint64(C.th_replica_version(ptr))}
	c.replicasMu.Lock()
	c.replicas[r] = struct{}{}
	c.replicasMu.Unlock()
	return r
}

// Version is the version the replica holds.
func (r *Replica) Version() uint64 { return r.version }

// Withdrawn reports whether the client withdrew this replica because its
// bytes no longer match its version's checksums (a reader reported chunks of
// it and the client, checking its own copy, found them changed): nobody reads
// from it any more, and its buffers do not hold that version. False once
// closed.
func (r *Replica) Withdrawn() bool {
	r.client.mu.RLock()
	defer r.client.mu.RUnlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ptr != nil && C.th_replica_withdrawn(r.ptr) != 0
}

// BeginMutation prepares to overwrite the buffers: no new reads are routed
// here, the client's retention policy applies if this is the last copy of a
// required version (ErrRetained with RetainFail), and reads in flight drain.
// After it returns nil the buffers may be overwritten; Close completes the
// mutation. Call it at most once. ErrClosed once the replica or its client is
// closed.
func (r *Replica) BeginMutation() error {
	// Lock order everywhere: the client's mu, then the replica's.
	return r.client.use(func(*C.th_client) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.ptr == nil {
			return newError(StatusClosed, "replica is closed")
		}
		return call(func() C.th_status { return C.th_replica_begin_mutation(r.ptr) })
	})
}

// Close withdraws the replica (readers move to other holders) and gives the
// buffers back to the caller, who may then overwrite or close them. It
// reports whether the server was told; the replica is gone either way.
// Idempotent; a no-op after the client's Close (which closed it).
func (r *Replica) Close() error {
	// Shared: release must not race th_client_destroy, but replicas of one
	// client may be released concurrently.
	r.client.mu.RLock()
	defer r.client.mu.RUnlock()
	return r.release()
}

// release frees the handle; the caller holds r.client.mu (either way).
func (r *Replica) release() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ptr == nil {
		return nil
	}
	err := call(func() C.th_status { return C.th_replica_release(r.ptr) })
	r.ptr = nil
	releaseAll(r.bufs)
	r.bufs = nil
	r.client.replicasMu.Lock()
	delete(r.client.replicas, r)
	r.client.replicasMu.Unlock()
	return err
}
