package tensorhub_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"tensorhub.dev/tensorhub"
)

type progressCall struct{ done, total uint64 }

// checkProgress fails unless calls are what a fetch of total bytes reports:
// done never decreasing, the same total every time, done == total last.
func checkProgress(t *testing.T, calls []progressCall, total uint64) {
	t.Helper()
	if len(calls) == 0 {
		t.Fatal("the progress callback was never called")
	}
	for i, c := range calls {
		if c.total != total || c.done > c.total || (i > 0 && c.done < calls[i-1].done) {
			t.Fatalf("call %d of %d: %+v (all: %v), want done rising to total %d", i, len(calls), c, calls, total)
		}
	}
	if last := calls[len(calls)-1]; last.done != total {
		t.Fatalf("the last call was %+v, not done == total", last)
	}
}

// A fetch reports its progress to the callback, on and on, ending with every
// byte; the options' stats are filled.
func TestFetchWithReportsProgress(t *testing.T) {
	c := newCluster(t)
	const total = 4 << 20
	src := shard(t, 1, total, 51)
	publish(t, c.pub, "p", 1, src) // 64 KiB chunks
	dst := shard(t, 1, total, 0)
	var calls []progressCall
	var stats tensorhub.SyncStats
	v, rep, err := c.reader.FetchWith(context.Background(), "p", tensorhub.Latest, 0, dst, false, tensorhub.FetchOptions{
		// The fetch waits for its callback: one that takes a millisecond
		// is due again whenever it returns, so it is called at every
		// turn of the fetch (the default interval, 100 ms, is longer than
		// the whole fetch).
		Progress: func(done, total uint64) {
			calls = append(calls, progressCall{done, total})
			time.Sleep(time.Millisecond)
		},
		ProgressInterval: time.Millisecond,
		Stats:            &stats,
	})
	if err != nil || v != 1 || rep != nil {
		t.Fatalf("FetchWith: v=%d replica=%v err=%v", v, rep, err)
	}
	sameBytes(t, dst, src)
	checkProgress(t, calls, total)
	if len(calls) < 3 {
		t.Fatalf("%d progress calls over %d chunks at a 1 ms interval: %v", len(calls), total/(64<<10), calls)
	}
	if stats.Version != 1 || stats.Bytes != total || stats.Chunks != total/(64<<10) {
		t.Fatalf("stats %+v", stats)
	}

	// The other options reach the library too.
	bad := tensorhub.Verify(7)
	if _, _, err := c.reader.FetchWith(context.Background(), "p", 1, 0, dst, false,
		tensorhub.FetchOptions{Verify: &bad}); !errors.Is(err, tensorhub.ErrInvalidArg) {
		t.Fatalf("an unknown verify mode: %v", err)
	}
	_, _, err = c.reader.FetchWith(context.Background(), "p", 1, 0, dst, false,
		tensorhub.FetchOptions{Progress: func(uint64, uint64) {}, ProgressInterval: -time.Second})
	wantCode(t, err, tensorhub.StatusInvalidArg, "progress interval is negative")
}

// FetchRangesWith reports progress over the ranges' bytes.
func TestFetchRangesWithReportsProgress(t *testing.T) {
	c := newCluster(t)
	src := shard(t, 2, size, 52)
	publish(t, c.pub, "pr", 1, src)
	a, b := tensorhub.NewBuffer(100<<10), tensorhub.NewBuffer(5000)
	defer a.Close()
	defer b.Close()
	var calls []progressCall
	var stats tensorhub.SyncStats
	v, err := c.reader.FetchRangesWith(context.Background(), "pr", tensorhub.Latest, 0, []tensorhub.Range{
		{Tensor: "w0", Offset: 1000, Dst: a},
		{Tensor: "w1", Offset: 3, Dst: b},
	}, tensorhub.FetchOptions{
		Progress: func(done, total uint64) { calls = append(calls, progressCall{done, total}) },
		Stats:    &stats,
	})
	if err != nil || v != 1 {
		t.Fatalf("FetchRangesWith: v=%d err=%v", v, err)
	}
	if string(a.Bytes()) != string(src[0].Data.Bytes()[1000:1000+100<<10]) ||
		string(b.Bytes()) != string(src[1].Data.Bytes()[3:5003]) {
		t.Fatal("range bytes differ")
	}
	checkProgress(t, calls, 100<<10+5000)
	if stats.Bytes != 100<<10+5000 {
		t.Fatalf("stats %+v", stats)
	}
}

type callbackBug struct{ at uint64 }

// fetchPanics runs a fetch whose progress callback panics and returns what
// the fetch call panicked with.
func fetchPanics(f func()) (value any) {
	defer func() { value = recover() }()
	f()
	return nil
}

// A panic in the progress callback does not unwind through the library: the
// fetch stops calling it, ends, and the fetch call panics with the same
// value; a replica the fetch made is closed, and the client works as before.
func TestAPanicInTheProgressCallbackReachesTheCaller(t *testing.T) {
	c := newCluster(t)
	const total = 4 << 20
	src := shard(t, 1, total, 53)
	publish(t, c.pub, "pp", 1, src)
	ctx := context.Background()

	for _, when := range []string{"first", "last"} {
		// serve: a replica the caller never sees must not keep the buffers
		// (shard's cleanup fails the test if one is still in use).
		dst := shard(t, 1, total, 0)
		calls := 0
		got := fetchPanics(func() {
			_, _, err := c.reader.FetchWith(ctx, "pp", 1, 0, dst, true, tensorhub.FetchOptions{
				ProgressInterval: time.Millisecond,
				Progress: func(done, total uint64) {
					calls++
					if when == "first" || done == total {
						panic(&callbackBug{done})
					}
				},
			})
			t.Errorf("%s: FetchWith returned (%v) instead of panicking", when, err)
		})
		bug, ok := got.(*callbackBug)
		if !ok {
			t.Fatalf("%s: the fetch call panicked with %#v, not the callback's value", when, got)
		}
		if when == "last" && bug.at != total {
			t.Fatalf("the callback panicked at %d of %d", bug.at, total)
		}
		if when == "first" && calls != 1 {
			t.Fatalf("the callback was called %d times, after it panicked on its first", calls)
		}
	}

	dst := shard(t, 1, total, 0)
	if _, _, err := c.reader.FetchWith(ctx, "pp", 1, 0, dst, false, tensorhub.FetchOptions{
		Progress: func(uint64, uint64) {},
	}); err != nil {
		t.Fatalf("a fetch after the panics: %v", err)
	}
	sameBytes(t, dst, src)
}
