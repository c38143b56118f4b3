package tensorhub

import (
	"context"
	"testing"
)

// Once the callback panicked it is not called again, even if the fetch
// still reports (it may have had every byte before it saw the cancellation
// the panic signalled), and the value is kept for the fetch to re-panic with.
func TestAProgressCallbackThatPanickedIsNotCalledAgain(t *testing.T) {
	token, stop, err := newCancelOnDone(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	calls := 0
	p := &progressCall{fn: func(uint64, uint64) { calls++; panic("a callback's bug") }, cancel: token}
	if _, ok := p.recovered(); ok {
		t.Fatal("recovered a panic before any call")
	}
	p.report(1, 2)
	p.report(2, 2)
	if calls != 1 {
		t.Fatalf("called %d times", calls)
	}
	if v, ok := p.recovered(); !ok || v != "a callback's bug" {
		t.Fatalf("recovered %v, %v", v, ok)
	}
	var none *progressCall // a fetch without a callback
	if _, ok := none.recovered(); ok {
		t.Fatal("a fetch without a callback panicked")
	}
}
