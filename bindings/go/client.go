package tensorhub

/*
#include "tensorhub/tensorhub.h"
*/
import "C"

import (
	"context"
	"runtime"
	"sync"
	"time"
)

// Retention is what a client does when a replica it mutates or releases is
// the last complete copy of a version that is still required.
type Retention int32

const (
	// RetainSpill copies the bytes into library-owned memory and serves that.
	RetainSpill Retention = C.TH_RETAIN_SPILL
	// RetainWait waits up to MutationWait for another replica, then spills.
	RetainWait Retention = C.TH_RETAIN_WAIT
	// RetainFail refuses with ErrRetained.
	RetainFail Retention = C.TH_RETAIN_FAIL
)

// ClientConfig configures a client. Zero fields keep the library defaults
// (the Default* constants).
type ClientConfig struct {
	// ServerURL is required, e.g. "tcp://10.0.0.1:7070". A comma-separated
	// list fails over along it (a Standby server after the one in use);
	// "etcd://h1:2379,h2:2379/tensorhub" follows the leader that etcd names
	// under that prefix (ServerConfig.EtcdEndpoints).
	ServerURL  string
	WorkerName string // default "<hostname>-<pid>"
	Labels     string // topology, "dc=eu,rack=r7,host=node12,gpu=0"; default host=<hostname>
	// Timeout bounds control calls and connecting. Default DefaultTimeout.
	Timeout      time.Duration
	Heartbeat    time.Duration // default DefaultHeartbeat
	ChunkTimeout time.Duration // a chunk read silent this long fails its source; default DefaultChunkTimeout
	MaxInflight  uint32        // chunk reads in flight per fetch (per stripe when striped); default DefaultMaxInflight
	Retention    Retention     // default DefaultRetention (RetainSpill)
	MutationWait time.Duration // how long BeginMutation waits for reads to drain; default DefaultMutationWait
	// SpillPoolBytes caps the host memory held for owned copies (spill); a
	// spill that does not fit fails with ErrNoMemory. Default
	// DefaultSpillPoolBytes (0: no limit).
	SpillPoolBytes uint64
	// SpillAhead makes the copy a spill would need right after each
	// publish, on a library thread: a BeginMutation after other work (the
	// next step's forward and backward) does not wait for it. Default
	// DefaultSpillAhead (off).
	SpillAhead bool
	// CopyThreads posts one-sided reads into host memory from this many
	// threads (1 to 16). On one host each read is a copy made by the
	// thread that posts it, so more threads read faster where cores are
	// free. Default DefaultCopyThreads.
	CopyThreads uint32
	// Token is the cluster token (see ServerConfig.Token); it must be the
	// server's, or calls fail with ErrAuth. Default (empty): $TENSORHUB_TOKEN
	// if set. Never logged.
	Token string
}

// Client is a worker connected to a server. Its methods may be called from
// any goroutine concurrently.
type Client struct {
	// Close holds mu exclusively because th_client_destroy must not race
	// with any other call on the client; every call holds it shared.
	mu      sync.RWMutex
	ptr     *C.th_client
	timeout C.uint32_t // the control-call timeout in effect

	// Open replicas, whose handles Close frees once th_client_destroy has
	// withdrawn them (the header: they stay valid only to be released).
	replicasMu sync.Mutex
	replicas   map[*Replica]struct{}
}

// Connect connects to the server at url with default settings.
func Connect(url string) (*Client, error) { return NewClient(ClientConfig{ServerURL: url}) }

// NewClient connects and registers with the server; it fails with
// ErrUnavailable if the server cannot be reached within cfg.Timeout.
func NewClient(cfg ClientConfig) (*Client, error) {
	var raw C.th_client_config
	C.th_client_config_init(&raw, C.sizeof_th_client_config)
	free, err := setStrings([]stringSetting{
		{"server URL", cfg.ServerURL, &raw.server_url},
		{"worker name", cfg.WorkerName, &raw.worker_name},
		{"labels", cfg.Labels, &raw.labels},
		{"token", cfg.Token, &raw.token},
	})
	defer free()
	if err != nil {
		return nil, err
	}
	if err := setDurations([]durationSetting{
		{"timeout", cfg.Timeout, &raw.timeout_ms},
		{"heartbeat", cfg.Heartbeat, &raw.heartbeat_ms},
		{"chunk timeout", cfg.ChunkTimeout, &raw.chunk_timeout_ms},
		{"mutation wait", cfg.MutationWait, &raw.mutation_wait_ms},
	}); err != nil {
		return nil, err
	}
	if cfg.MaxInflight != 0 {
		raw.max_inflight = C.uint32_t(cfg.MaxInflight)
	}
	raw.retention = C.th_retention(cfg.Retention)
	if cfg.SpillPoolBytes != 0 {
		raw.spill_pool_bytes = C.uint64_t(cfg.SpillPoolBytes)
	}
	if cfg.SpillAhead {
		raw.spill_ahead = 1
	}
	if cfg.CopyThreads != 0 {
		raw.copy_threads = C.uint32_t(cfg.CopyThreads)
	}

	var ptr *C.th_client
	if err := call(func() C.th_status { return C.th_client_create(&ptr, &raw) }); err != nil {
		return nil, err
	}
	c := &Client{ptr: ptr, timeout: raw.timeout_ms, replicas: map[*Replica]struct{}{}}
	// A forgotten client without open replicas would keep its threads and
	// connection for good. (Open replicas keep it reachable.)
	runtime.SetFinalizer(c, (*Client).Close)
	return c, nil
}

// use runs f with the client's handle, or fails with ErrClosed after Close.
func (c *Client) use(f func(*C.th_client) error) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.ptr == nil {
		return newError(StatusClosed, "client is closed")
	}
	err := f(c.ptr)
	// The finalizer must not destroy the client while f's C call runs.
	runtime.KeepAlive(c)
	return err
}

// Close withdraws every replica the client still holds, disconnects and
// frees the client, as th_client_destroy does; the replicas' buffers are then
// the caller's again (Replica.Close is a no-op afterwards). It must not be
// called while the client's buffers are being written. Idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ptr == nil {
		return nil
	}
	C.th_client_destroy(c.ptr)
	c.ptr = nil
	runtime.SetFinalizer(c, nil)
	c.replicasMu.Lock()
	open := make([]*Replica, 0, len(c.replicas))
	for r := range c.replicas {
		open = append(open, r)
	}
	c.replicasMu.Unlock()
	// Their client withdrew them: releasing a handle now only frees it.
	var first error
	for _, r := range open {
		if err := r.release(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// WorkerID is the id the server knows this client by (0 after Close).
func (c *Client) WorkerID() uint64 {
	var id uint64
	_ = c.use(func(p *C.th_client) error {
		id = uint64(C.th_client_worker_id(p))
		return nil
	})
	return id
}

// withModel runs f with the client and model as a C string.
func (c *Client) withModel(model string, f func(*C.th_client, *C.char) C.th_status) error {
	cm, err := cString("model", model)
	if err != nil {
		return err
	}
	defer freeString(cm)
	return c.use(func(p *C.th_client) error {
		return call(func() C.th_status { return f(p, cm) })
	})
}

// Resolve maps version (a number or Latest) to a committed version.
func (c *Client) Resolve(model string, version uint64) (uint64, error) {
	var out C.uint64_t
	err := c.withModel(model, func(p *C.th_client, m *C.char) C.th_status {
		return C.th_resolve(p, m, C.uint64_t(version), &out)
	})
	return uint64(out), err
}

// WaitForVersion waits until model has a committed version newer than
// newerThan (0: any) and returns it. ctx's deadline bounds the wait (the
// client's Timeout without one); running out yields ErrTimeout, which then
// also matches context.DeadlineExceeded. A ctx canceled meanwhile ends the
// wait within about 20 ms with ErrCanceled (which also matches
// context.Canceled).
func (c *Client) WaitForVersion(ctx context.Context, model string, newerThan uint64) (uint64, error) {
	timeout, err := deadline(ctx, c.timeout)
	if err != nil {
		return 0, err
	}
	token, stop, err := cancelOnDone(ctx)
	if err != nil {
		return 0, err
	}
	defer stop()
	var out C.uint64_t
	err = c.withModel(model, func(p *C.th_client, m *C.char) C.th_status {
		return C.th_wait_for_version_cancelable(p, m, C.uint64_t(newerThan), timeout, token, &out)
	})
	return uint64(out), withContext(ctx, err)
}

// Describe returns the layout of a shard of a committed version (a number or
// Latest) as JSON, so that a reader can allocate its buffers before fetching.
func (c *Client) Describe(model string, version uint64, shard uint32) (string, error) {
	var json *C.char
	err := c.withModel(model, func(p *C.th_client, m *C.char) C.th_status {
		return C.th_describe_json(p, m, C.uint64_t(version), C.uint32_t(shard), &json)
	})
	if err != nil {
		return "", err
	}
	return takeString(json), nil
}

// Status returns the server's state as JSON.
func (c *Client) Status() (string, error) {
	var json *C.char
	err := c.use(func(p *C.th_client) error {
		return call(func() C.th_status { return C.th_status_json(p, &json) })
	})
	if err != nil {
		return "", err
	}
	return takeString(json), nil
}

// Pin keeps (model, version) required until Unpin or until the client closes.
func (c *Client) Pin(model string, version uint64) error {
	return c.withModel(model, func(p *C.th_client, m *C.char) C.th_status {
		return C.th_pin(p, m, C.uint64_t(version))
	})
}

// Unpin undoes Pin.
func (c *Client) Unpin(model string, version uint64) error {
	return c.withModel(model, func(p *C.th_client, m *C.char) C.th_status {
		return C.th_unpin(p, m, C.uint64_t(version))
	})
}
