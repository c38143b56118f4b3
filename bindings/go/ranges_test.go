package tensorhub_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"tensorhub.dev/tensorhub"
)

// A column block of a row-major matrix and a byte range of another tensor
// come in one fetch that moves only those bytes.
func TestFetchRangesColumnBlock(t *testing.T) {
	c := newCluster(t)
	src := shard(t, 2, size, 30)
	publish(t, c.pub, "cols", 1, src)
	const rows, cols = 64, 2048 // w0 seen as a [64, 2048] byte matrix
	block := tensorhub.NewBuffer(rows * 512)
	tail := tensorhub.NewBuffer(100)
	defer block.Close()
	defer tail.Close()
	v, stats, err := c.reader.FetchRanges(context.Background(), "cols", tensorhub.Latest, 0, []tensorhub.Range{
		{Tensor: "w0", Offset: 1024, RowBytes: 512, Rows: rows, SrcStride: cols, Dst: block},
		{Tensor: "w1", Offset: size - 100, Dst: tail},
	})
	if err != nil || v != 1 {
		t.Fatalf("FetchRanges: v=%d err=%v", v, err)
	}
	if stats.Bytes != rows*512+100 {
		t.Fatalf("moved %d bytes", stats.Bytes)
	}
	w0, w1 := src[0].Data.Bytes(), src[1].Data.Bytes()
	for r := 0; r < rows; r++ {
		if !bytes.Equal(block.Bytes()[r*512:(r+1)*512], w0[r*cols+1024:r*cols+1536]) {
			t.Fatalf("row %d differs", r)
		}
	}
	if !bytes.Equal(tail.Bytes(), w1[size-100:]) {
		t.Fatal("tail differs")
	}

	_, _, err = c.reader.FetchRanges(context.Background(), "cols", tensorhub.Latest, 0,
		[]tensorhub.Range{{Tensor: "nope", Dst: tail}})
	if !errors.Is(err, tensorhub.ErrNotFound) || !strings.Contains(err.Error(), "'nope'") {
		t.Fatalf("unknown tensor: %v", err)
	}
	_, _, err = c.reader.FetchRanges(context.Background(), "cols", tensorhub.Latest, 0,
		[]tensorhub.Range{{Tensor: "w1", Offset: size - 5, Dst: tail}})
	if !errors.Is(err, tensorhub.ErrInvalidArg) || !strings.Contains(err.Error(), "outside tensor 'w1'") {
		t.Fatalf("out of bounds: %v", err)
	}
}
