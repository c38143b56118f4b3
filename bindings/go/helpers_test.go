package tensorhub_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"tensorhub.dev/tensorhub"
)

// cluster is an embedded server with a publishing and a reading client.
type cluster struct {
	server      *tensorhub.Server
	pub, reader *tensorhub.Client
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	s, err := tensorhub.NewServer("tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{server: s, pub: connect(t, s.URL(), "pub"), reader: connect(t, s.URL(), "reader")}
	// Cleanups run last-in first-out: clients go before the server.
	t.Cleanup(func() { s.Close() })
	t.Cleanup(func() { c.pub.Close(); c.reader.Close() })
	return c
}

func connect(t *testing.T, url, name string) *tensorhub.Client {
	t.Helper()
	c, err := tensorhub.NewClient(tensorhub.ClientConfig{
		ServerURL: url, WorkerName: name, Timeout: 5 * time.Second, Heartbeat: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("connect %s: %v", name, err)
	}
	return c
}

// shard makes n bfloat16 tensors "w0".."w{n-1}" of size bytes each, filled
// with a pattern of seed (or zero when seed is 0), closed at test end.
func shard(t *testing.T, n, size int, seed uint64) []tensorhub.Tensor {
	t.Helper()
	out := make([]tensorhub.Tensor, n)
	for i := range out {
		b := tensorhub.NewBuffer(size)
		if seed != 0 {
			fill(b.Bytes(), seed+uint64(i))
		}
		out[i] = tensorhub.Tensor{
			Name: "w" + strconv.Itoa(i), DType: tensorhub.BFloat16, Shape: []int64{int64(size / 2)}, Data: b,
		}
		t.Cleanup(func() {
			if err := b.Close(); err != nil {
				t.Errorf("buffer still in use at test end: %v", err)
			}
		})
	}
	return out
}

// fill writes deterministic bytes that differ per seed and position.
func fill(b []byte, seed uint64) {
	x := seed*0x9E3779B97F4A7C15 | 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
}

func sameBytes(t *testing.T, got, want []tensorhub.Tensor) {
	t.Helper()
	for i := range want {
		if string(got[i].Data.Bytes()) != string(want[i].Data.Bytes()) {
			t.Fatalf("tensor %s differs", want[i].Name)
		}
	}
}

// wantCode fails unless err is a *tensorhub.Error with code and a message
// containing text.
func wantCode(t *testing.T, err error, code tensorhub.Status, text string) {
	t.Helper()
	var e *tensorhub.Error
	if !errors.As(err, &e) {
		t.Fatalf("want %v error, got %v", code, err)
	}
	if e.Code() != code || !strings.Contains(e.Error(), text) {
		t.Fatalf("want %v containing %q, got %v", code, text, err)
	}
}
