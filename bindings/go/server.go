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

// ServerConfig configures an embedded server. Zero fields keep the library
// defaults (the Default* constants).
type ServerConfig struct {
	// ListenURL is an NNG URL; port 0 picks a free port (see Server.URL).
	// Default DefaultListenURL.
	ListenURL string
	// Lease: a worker silent for this long loses its replicas. Default DefaultLease.
	Lease time.Duration
	// MaxReadersPerSource caps the fan-out per source while others exist.
	// Default DefaultMaxReadersPerSource.
	MaxReadersPerSource uint32
	// Stripes: readers that serve read a shard in this many stripes, each
	// relayed along its own tree (1: chains; at most 11). Default
	// DefaultStripes (0: 8 once 24 workers are registered, else chains).
	Stripes uint32
	// Token is the cluster token: when set, every message must carry an
	// HMAC-SHA256 under it, and peers without it fail with ErrAuth. Default
	// (empty): $TENSORHUB_TOKEN if set, else none.
	Token string
	// MetricsURL, when set, serves HTTP at this URL, e.g.
	// "http://0.0.0.0:9090" (port 0: any free port): Prometheus metrics at
	// <url>/metrics (see Server.MetricsURL), a live page at <url>/ and the
	// status JSON it polls at <url>/api/status. Default: no HTTP.
	MetricsURL string
	// Standby makes a server that waits to take over from another (listed
	// after it in the clients' ServerURL). Until workers fail over to it, and
	// for one lease after, it cannot tell "unknown" from "not declared
	// again yet", so such answers make clients ask again (within their
	// timeouts) instead of failing.
	Standby bool
	// EtcdEndpoints, "host:port[,host:port...]" of etcd's client URLs (plain
	// HTTP), makes the server one of a highly available group: servers with
	// the same endpoints and EtcdPrefix campaign for leadership, only the
	// leader serves, and clients follow it with ServerURL
	// "etcd://<endpoints><prefix>". Default: no etcd.
	EtcdEndpoints string
	// EtcdPrefix is where in etcd this cluster keeps its keys; it starts with
	// '/'. Default DefaultEtcdPrefix.
	EtcdPrefix string
	// EtcdLease is the leader's etcd lease (whole seconds, at least 2 s): a
	// dead leader is replaced within about this long. Default DefaultEtcdLease.
	EtcdLease time.Duration
	// AdvertiseURL is the URL clients reach this server at, published in
	// etcd. Default: the bound URL, which must then not be a wildcard
	// address (0.0.0.0).
	AdvertiseURL string
}

// Server is a metadata server running in this process on its own threads.
type Server struct {
	mu         sync.Mutex
	ptr        *C.th_server
	url        string
	metricsURL string
}

// NewServer starts a server listening on listenURL, e.g. "tcp://127.0.0.1:0".
func NewServer(listenURL string) (*Server, error) {
	return NewServerWithConfig(ServerConfig{ListenURL: listenURL})
}

// NewServerWithConfig starts a server with cfg.
func NewServerWithConfig(cfg ServerConfig) (*Server, error) {
	var raw C.th_server_config
	C.th_server_config_init(&raw, C.sizeof_th_server_config)
	free, err := setStrings([]stringSetting{
		{"listen URL", cfg.ListenURL, &raw.listen_url},
		{"token", cfg.Token, &raw.token},
		{"metrics URL", cfg.MetricsURL, &raw.metrics_url},
		{"etcd endpoints", cfg.EtcdEndpoints, &raw.etcd_endpoints},
		{"etcd prefix", cfg.EtcdPrefix, &raw.etcd_prefix},
		{"advertise URL", cfg.AdvertiseURL, &raw.advertise_url},
	})
	defer free()
	if err != nil {
		return nil, err
	}
	if err := setDurations([]durationSetting{
		{"lease", cfg.Lease, &raw.lease_ms},
		{"etcd lease", cfg.EtcdLease, &raw.etcd_lease_ms},
	}); err != nil {
		return nil, err
	}
	if cfg.MaxReadersPerSource != 0 {
		raw.max_readers_per_source = C.uint32_t(cfg.MaxReadersPerSource)
	}
	if cfg.Stripes != 0 {
		raw.stripes = C.uint32_t(cfg.Stripes)
	}
	if cfg.Standby {
		raw.standby = 1
	}
	var ptr *C.th_server
	if err := call(func() C.th_status { return C.th_server_create(&ptr, &raw) }); err != nil {
		return nil, err
	}
	s := &Server{ptr: ptr, url: C.GoString(C.th_server_url(ptr)), metricsURL: C.GoString(C.th_server_metrics_url(ptr))}
	// A forgotten server would keep its port and threads for good.
	runtime.SetFinalizer(s, (*Server).Close)
	return s, nil
}

// URL is the address clients connect to, with the real port.
func (s *Server) URL() string { return s.url }

// MetricsURL is the URL of the server's Prometheus endpoint, with the real
// port and the /metrics path ("http://127.0.0.1:41234/metrics"), or "" when
// ServerConfig.MetricsURL was not set.
func (s *Server) MetricsURL() string { return s.metricsURL }

// Close stops the server; clients see ErrUnavailable afterwards. Idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ptr != nil {
		C.th_server_destroy(s.ptr)
		s.ptr = nil
		runtime.SetFinalizer(s, nil)
	}
	return nil
}

// ServerStatus asks the server at url for its state as JSON without a client.
// ctx's deadline bounds the call (default 10 s).
func ServerStatus(ctx context.Context, url string) (string, error) {
	timeout, err := deadline(ctx, 0)
	if err != nil {
		return "", err
	}
	curl, err := cString("server URL", url)
	if err != nil {
		return "", err
	}
	defer freeString(curl)
	var json *C.char
	if err := call(func() C.th_status { return C.th_server_status_json(curl, timeout, &json) }); err != nil {
		return "", withContext(ctx, err)
	}
	return takeString(json), nil
}
