package tensorhub

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The C calls take a uint32 millisecond timeout; ctx supplies it.
func TestDeadlineMapping(t *testing.T) {
	bg := context.Background()
	if ms, err := deadline(bg, 1234); err != nil || uint32(ms) != 1234 {
		t.Fatalf("no deadline: want the fallback, got %d %v", ms, err)
	}
	ctx, cancel := context.WithTimeout(bg, 2500*time.Millisecond)
	defer cancel()
	if ms, err := deadline(ctx, 0); err != nil || ms < 2000 || ms > 2500 {
		t.Fatalf("2.5 s deadline: got %d ms %v", ms, err)
	}
	if ms, _ := millis(time.Microsecond, "x"); ms != 1 {
		t.Fatalf("sub-millisecond rounds to %d, want 1 (0 would mean default)", ms)
	}
	if ms, _ := millis(24*365*time.Hour, "x"); uint32(ms) != ^uint32(0) {
		t.Fatalf("huge duration did not saturate: %d", ms)
	}
	if _, err := millis(-time.Second, "x"); !errors.Is(err, ErrInvalidArg) {
		t.Fatalf("negative duration: %v", err)
	}
	done, cancel := context.WithTimeout(bg, -time.Second)
	defer cancel()
	if _, err := deadline(done, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("expired: %v", err)
	}
}
