package tensorhub_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"tensorhub.dev/tensorhub"
)

const size = 256 << 10

func publish(t *testing.T, c *tensorhub.Client, model string, version uint64, tensors []tensorhub.Tensor) *tensorhub.Replica {
	t.Helper()
	// Small chunks so that a fetch spans several of them.
	r, err := c.Publish(tensorhub.PublishConfig{Model: model, Version: version, ChunkBytes: 64 << 10}, tensors)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func TestRoundTripAndServingFetch(t *testing.T) {
	c := newCluster(t)
	src := shard(t, 3, size, 1)
	published := publish(t, c.pub, "m", 1, src)
	if published.Version() != 1 {
		t.Fatalf("replica version %d", published.Version())
	}
	ctx := context.Background()

	dst := shard(t, 3, size, 0)
	v, rep, err := c.reader.Fetch(ctx, "m", tensorhub.Latest, 0, dst, false)
	if err != nil || v != 1 || rep != nil {
		t.Fatalf("fetch: v=%d replica=%v err=%v", v, rep, err)
	}
	sameBytes(t, dst, src)

	// A serving fetch makes the reader a second holder...
	served := shard(t, 3, size, 0)
	_, rep, err = c.reader.Fetch(ctx, "m", 1, 0, served, true)
	if err != nil || rep == nil || rep.Version() != 1 {
		t.Fatalf("serving fetch: replica=%v err=%v", rep, err)
	}
	// ...whose buffers cannot be freed while served.
	if err := served[0].Data.Close(); err == nil {
		t.Fatal("closing a served buffer succeeded")
	}
	// With the publisher withdrawn, a third client is served by the reader.
	if err := published.Close(); err != nil {
		t.Fatal(err)
	}
	third := connect(t, c.server.URL(), "third")
	defer third.Close()
	again := shard(t, 3, size, 0)
	if _, _, err := third.Fetch(ctx, "m", tensorhub.Latest, 0, again, false); err != nil {
		t.Fatal(err)
	}
	sameBytes(t, again, src)
	if err := rep.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestRangeResolveAndStatus(t *testing.T) {
	c := newCluster(t)
	src := shard(t, 2, size, 10)
	publish(t, c.pub, "r", 4, src)

	part := tensorhub.NewBuffer(5000)
	defer part.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Odd offset across a chunk boundary.
	v, err := c.reader.FetchRange(ctx, "r", tensorhub.Latest, 0, "w1", 100001, part)
	if err != nil || v != 4 {
		t.Fatalf("range: v=%d err=%v", v, err)
	}
	if string(part.Bytes()) != string(src[1].Data.Bytes()[100001:105001]) {
		t.Fatal("range bytes differ")
	}

	for _, asked := range []uint64{tensorhub.Latest, 4} {
		if v, err := c.reader.Resolve("r", asked); err != nil || v != 4 {
			t.Fatalf("resolve %d: v=%d err=%v", asked, v, err)
		}
	}
	status, err := c.reader.Status()
	if err != nil || !strings.Contains(status, `"r"`) {
		t.Fatalf("status: %v %s", err, status)
	}
	remote, err := tensorhub.ServerStatus(ctx, c.server.URL())
	if err != nil || !strings.Contains(remote, `"r"`) {
		t.Fatalf("server status: %v %s", err, remote)
	}
	if c.pub.WorkerID() == c.reader.WorkerID() {
		t.Fatal("two clients share a worker id")
	}
}

func TestConcurrentFetchesShareOneClient(t *testing.T) {
	c := newCluster(t)
	src := shard(t, 1, size, 7)
	publish(t, c.pub, "c", 1, src)
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		dst := shard(t, 1, size, 0)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, err := c.reader.Fetch(context.Background(), "c", tensorhub.Latest, 0, dst, false); err != nil {
				t.Error(err)
				return
			}
			sameBytes(t, dst, src)
		}()
	}
	wg.Wait()
}

func TestDescribeWaitAndPin(t *testing.T) {
	c := newCluster(t)
	src := []tensorhub.Tensor{shard(t, 1, 4096, 1)[0], shard(t, 1, 8192, 2)[0]}
	src[1].Name = "w1"
	publish(t, c.pub, "d", 1, src)

	json, err := c.reader.Describe("d", tensorhub.Latest, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"model"`, `"d"`, `"w0"`, `"w1"`, "bfloat16", "8192"} {
		if !strings.Contains(json, want) {
			t.Errorf("describe JSON lacks %s: %s", want, json)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if v, err := c.reader.WaitForVersion(ctx, "d", 0); err != nil || v != 1 {
		t.Errorf("WaitForVersion: got %d, %v", v, err)
	}
	if err := c.reader.Pin("d", 1); err != nil {
		t.Fatal(err)
	}
	if err := c.reader.Unpin("d", 1); err != nil {
		t.Error(err)
	}
}

func TestBeginMutationKeepsTheLastCopyAvailable(t *testing.T) {
	c := newCluster(t)
	src := shard(t, 1, size, 3)
	r := publish(t, c.pub, "mut", 1, src)
	if err := r.BeginMutation(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	// The default retention policy spills the last copy of the newest version.
	dst := shard(t, 1, size, 0)
	if _, _, err := c.reader.Fetch(context.Background(), "mut", 1, 0, dst, false); err != nil {
		t.Fatal(err)
	}
	sameBytes(t, dst, src)
}

func TestStatsSayWhatASyncDid(t *testing.T) {
	c := newCluster(t)
	src := shard(t, 2, size, 7)
	r, pstats, err := c.pub.PublishWithStats(tensorhub.PublishConfig{Model: "s", Version: 3, ChunkBytes: 64 << 10}, src)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if pstats.Version != 3 || pstats.Bytes != 2*size || pstats.Chunks != 2*size/(64<<10) || pstats.GBps != 0 {
		t.Fatalf("publish stats %+v", pstats)
	}
	dst := shard(t, 2, size, 0)
	v, rep, fstats, err := c.reader.FetchWithStats(context.Background(), "s", tensorhub.Latest, 0, dst, false)
	if err != nil || v != 3 || rep != nil {
		t.Fatalf("fetch: v=%d replica=%v err=%v", v, rep, err)
	}
	sameBytes(t, dst, src)
	if fstats.Version != 3 || fstats.Bytes != 2*size || fstats.Sources != 1 || fstats.FailedSources != 0 ||
		fstats.BytesFromPublisher != 2*size || fstats.BytesFromReplicas != 0 || fstats.Seconds <= 0 || fstats.GBps <= 0 ||
		// One holder, one read path: all of it one-sided or none of it.
		(fstats.BytesOneSided != 0 && fstats.BytesOneSided != fstats.Bytes) || pstats.BytesOneSided != 0 ||
		// Read from a complete replica: nothing waited for.
		fstats.BytesWaited != 0 || pstats.BytesWaited != 0 ||
		// Nothing changed under the reader: nothing had to be kept.
		fstats.BytesKept != 0 || pstats.BytesKept != 0 ||
		// The plan and the end report: round trips to the server.
		fstats.ServerSeconds <= 0 || fstats.ServerSeconds >= fstats.Seconds {
		t.Fatalf("fetch stats %+v", fstats)
	}
	if pstats.ServerSeconds <= 0 || pstats.ServerSeconds > pstats.Seconds {
		t.Fatalf("publish stats %+v: the declaration is a round trip", pstats)
	}
}

// A fetch that checks every chunk against the publisher's checksums delivers
// the same bytes and finds nothing wrong with an honest holder; one that
// skips them likewise.
func TestFetchVerifiedChecksEveryChunk(t *testing.T) {
	c := newCluster(t)
	src := shard(t, 2, size, 9)
	r, err := c.pub.Publish(tensorhub.PublishConfig{Model: "v", Version: 1, ChunkBytes: 64 << 10}, src)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, mode := range []tensorhub.Verify{tensorhub.VerifyAll, tensorhub.VerifyOff} {
		dst := shard(t, 2, size, 0)
		_, _, stats, err := c.reader.FetchVerified(context.Background(), "v", tensorhub.Latest, 0, dst, false, mode)
		if err != nil {
			t.Fatalf("verify %d: %v", mode, err)
		}
		sameBytes(t, dst, src)
		if stats.ChecksumMismatches != 0 {
			t.Fatalf("verify %d: %d mismatches from an honest publisher", mode, stats.ChecksumMismatches)
		}
	}
	if _, _, _, err := c.reader.FetchVerified(context.Background(), "v", tensorhub.Latest, 0, shard(t, 2, size, 0), false,
		tensorhub.Verify(7)); !errors.Is(err, tensorhub.ErrInvalidArg) {
		t.Fatalf("an unknown verify mode: %v", err)
	}
}

// A serving reader whose bytes change behind the library's back is reported
// by a reader that checks every chunk; at its next heartbeat it checks its
// own copy and withdraws the replica.
func TestAHolderReportedCorruptWithdrawsItsReplica(t *testing.T) {
	c := newCluster(t)
	publish(t, c.pub, "w", 1, shard(t, 2, size, 5))
	ctx := context.Background()
	served := shard(t, 2, size, 0)
	_, rep, err := c.reader.Fetch(ctx, "w", 1, 0, served, true)
	if err != nil || rep == nil {
		t.Fatalf("serving fetch: replica=%v err=%v", rep, err)
	}
	defer rep.Close()
	if rep.Withdrawn() {
		t.Fatal("a replica just fetched is withdrawn")
	}
	served[0].Data.Bytes()[3*(64<<10)+17] ^= 0xff // chunk 3 changes
	careful := connect(t, c.server.URL(), "careful")
	defer careful.Close()
	_, _, stats, err := careful.FetchVerified(ctx, "w", 1, 0, shard(t, 2, size, 0), false, tensorhub.VerifyAll)
	if err != nil || stats.ChecksumMismatches != 1 {
		t.Fatalf("checked fetch: %d mismatches, err=%v", stats.ChecksumMismatches, err)
	}
	for deadline := time.Now().Add(10 * time.Second); !rep.Withdrawn() && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if !rep.Withdrawn() {
		t.Fatal("the changed replica was not withdrawn")
	}
}
