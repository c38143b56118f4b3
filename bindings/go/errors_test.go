package tensorhub_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"tensorhub.dev/tensorhub"
)

func TestUnknownModelIsNotFound(t *testing.T) {
	c := newCluster(t)
	_, _, err := c.reader.Fetch(context.Background(), "nope", tensorhub.Latest, 0, shard(t, 1, 16, 0), false)
	wantCode(t, err, tensorhub.StatusNotFound, "'nope'")
	if !errors.Is(err, tensorhub.ErrNotFound) || errors.Is(err, tensorhub.ErrTimeout) {
		t.Fatalf("errors.Is does not match by status: %v", err)
	}
	_, err = c.reader.Resolve("nope", tensorhub.Latest)
	wantCode(t, err, tensorhub.StatusNotFound, "'nope'")
}

func TestUnreachableServerIsUnavailableWithinTheDeadline(t *testing.T) {
	start := time.Now()
	_, err := tensorhub.NewClient(tensorhub.ClientConfig{ServerURL: "tcp://127.0.0.1:1", Timeout: 300 * time.Millisecond})
	wantCode(t, err, tensorhub.StatusUnavailable, "tcp://127.0.0.1:1")
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v", d)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, err = tensorhub.ServerStatus(ctx, "tcp://127.0.0.1:1")
	wantCode(t, err, tensorhub.StatusUnavailable, "")
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("the context deadline was not passed on: took %v", d)
	}
}

func TestContextDeadline(t *testing.T) {
	c := newCluster(t)
	publish(t, c.pub, "m", 1, shard(t, 1, 4096, 1))

	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if _, _, err := c.reader.Fetch(expired, "m", 1, 0, shard(t, 1, 4096, 0), false); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("expired context: %v", err)
	}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.reader.FetchRange(canceled, "m", 1, 0, "w0", 0, tensorhub.NewBuffer(8)); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled context: %v", err)
	}

	// Waiting for a version that never comes ends at the context's deadline.
	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.reader.WaitForVersion(short, "m", 1)
	if !errors.Is(err, tensorhub.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want a timeout that also matches context.DeadlineExceeded, got %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("took %v", d)
	}
}

func TestLayoutMismatchAndBadArguments(t *testing.T) {
	c := newCluster(t)
	publish(t, c.pub, "m", 1, shard(t, 1, 4096, 1))
	_, _, err := c.reader.Fetch(context.Background(), "m", 1, 0, shard(t, 1, 2048, 0), false)
	wantCode(t, err, tensorhub.StatusLayoutMismatch, "'w0' has 4096 bytes, 2048 given")

	_, err = c.reader.Publish(tensorhub.PublishConfig{Model: "m", Version: 1}, shard(t, 1, 2048, 2))
	wantCode(t, err, tensorhub.StatusConflict, "")
	_, err = c.reader.Resolve("a\x00b", tensorhub.Latest)
	wantCode(t, err, tensorhub.StatusInvalidArg, "NUL")
	bad := shard(t, 1, 64, 0)
	bad[0].Shape = make([]int64, 9)
	_, err = c.pub.Publish(tensorhub.PublishConfig{Model: "m", Version: 2}, bad)
	wantCode(t, err, tensorhub.StatusInvalidArg, "ndim 9")
	closed := tensorhub.NewBuffer(64)
	closed.Close()
	_, err = c.pub.Publish(tensorhub.PublishConfig{Model: "m", Version: 2}, []tensorhub.Tensor{tensorhub.BytesTensor("w0", closed)})
	wantCode(t, err, tensorhub.StatusInvalidArg, "buffer is closed")
}

func TestDoubleCloseAndUseAfterClose(t *testing.T) {
	s, err := tensorhub.NewServer("tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := connect(t, s.URL(), "closer")
	other := connect(t, s.URL(), "other")
	defer other.Close()
	src := shard(t, 1, 4096, 1)
	r, err := c.Publish(tensorhub.PublishConfig{Model: "m", Version: 1}, src)
	if err != nil {
		t.Fatal(err)
	}
	// Closing the client withdraws its replicas (th_client_destroy); they may
	// still be closed again.
	for i := 0; i < 2; i++ {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	dst := shard(t, 1, 4096, 0)
	if _, _, err := other.Fetch(context.Background(), "m", 1, 0, dst, false); !errors.Is(err, tensorhub.ErrUnavailable) {
		t.Fatalf("fetch of a version whose only holder closed: %v", err)
	}
	if err := r.BeginMutation(); !errors.Is(err, tensorhub.ErrClosed) {
		t.Fatalf("begin mutation after client close: %v", err)
	}
	for i := 0; i < 2; i++ {
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Resolve("m", tensorhub.Latest); !errors.Is(err, tensorhub.ErrClosed) {
		t.Fatalf("call after close: %v", err)
	}
	for i := 0; i < 2; i++ {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := src[0].Data.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if src[0].Data.Bytes() != nil {
		t.Fatal("Bytes after Close")
	}
}

// The C message is thread-local: concurrent failures keep their own.
func TestMessagesStayWithTheirGoroutine(t *testing.T) {
	c := newCluster(t)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		model := fmt.Sprintf("missing-%d", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 50; j++ {
				_, err := c.reader.Resolve(model, tensorhub.Latest)
				if e, ok := err.(*tensorhub.Error); !ok || !errors.Is(e, tensorhub.ErrNotFound) || !strings.Contains(e.Message(), model) {
					t.Errorf("%s: %v", model, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// doneAfterCheck is a context that passes the check before the C call and is
// done by the time the call starts: what a context canceled during a fetch
// looks like, without a race.
type doneAfterCheck struct {
	context.Context
	done   chan struct{}
	checks int
}

func (c *doneAfterCheck) Done() <-chan struct{} { return c.done }
func (c *doneAfterCheck) Err() error {
	c.checks++
	if c.checks == 1 {
		return nil
	}
	return context.Canceled
}

func TestAContextCanceledDuringAFetchEndsItWithErrCanceled(t *testing.T) {
	c := newCluster(t)
	publish(t, c.pub, "m", 1, shard(t, 1, 1<<20, 1))

	ctx := &doneAfterCheck{Context: context.Background(), done: make(chan struct{})}
	close(ctx.done)
	dst := shard(t, 1, 1<<20, 0)
	_, _, err := c.reader.Fetch(ctx, "m", 1, 0, dst, false)
	if !errors.Is(err, tensorhub.ErrCanceled) || !errors.Is(err, context.Canceled) {
		t.Fatalf("want ErrCanceled that also matches context.Canceled, got %v", err)
	}
	if !strings.Contains(err.Error(), "canceled before its first read") {
		t.Fatalf("message: %v", err)
	}
	if _, _, err := c.reader.Fetch(context.Background(), "m", 1, 0, dst, false); err != nil {
		t.Fatalf("the fetch after a canceled one: %v", err)
	}
}

func TestAContextCanceledDuringAWaitEndsIt(t *testing.T) {
	c := newCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	timer := time.AfterFunc(200*time.Millisecond, cancel)
	defer timer.Stop()
	start := time.Now()
	_, err := c.reader.WaitForVersion(ctx, "m", 0)
	if !errors.Is(err, tensorhub.ErrCanceled) || !errors.Is(err, context.Canceled) {
		t.Fatalf("want ErrCanceled that also matches context.Canceled, got %v", err)
	}
	// Not a timing claim: the context's cancel ended a wait that had a minute left.
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("took %v", d)
	}
}
