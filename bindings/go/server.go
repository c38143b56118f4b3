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
}

// Server is a metadata server running in this process on its own threads.
type Server struct {
	mu  sync.Mutex
	ptr *C.th_server
	url string
}

// NewServer starts a server listening on listenURL, e.g. "tcp://127.0.0.1:0".
func NewServer(listenURL string) (*Server, error) {
	return NewServerWithConfig(ServerConfig{ListenURL: listenURL})
}

// NewServerWithConfig starts a server with cfg.
func NewServerWithConfig(cfg ServerConfig) (*Server, error) {
	var raw C.th_server_config
	C.th_server_config_init(&raw, C.sizeof_th_server_config)
	if cfg.ListenURL != "" {
		url, err := cString("listen URL", cfg.ListenURL)
		if err != nil {
			return nil, err
		}
		defer freeString(url)
		raw.listen_url = url
	}
	lease, err := millis(cfg.Lease, "lease")
	if err != nil {
		return nil, err
	}
	if lease != 0 {
		raw.lease_ms = lease
	}
	if cfg.MaxReadersPerSource != 0 {
		raw.max_readers_per_source = C.uint32_t(cfg.MaxReadersPerSource)
	}
	if cfg.Stripes != 0 {
		raw.stripes = C.uint32_t(cfg.Stripes)
	}
	var ptr *C.th_server
	if err := call(func() C.th_status { return C.th_server_create(&ptr, &raw) }); err != nil {
		return nil, err
	}
	s := &Server{ptr: ptr, url: C.GoString(C.th_server_url(ptr))}
	// A forgotten server would keep its port and threads for good.
	runtime.SetFinalizer(s, (*Server).Close)
	return s, nil
}

// URL is the address clients connect to, with the real port.
func (s *Server) URL() string { return s.url }

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
