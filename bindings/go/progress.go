package tensorhub

/*
#include <stdint.h>
#include "tensorhub/tensorhub.h"

void th_go_set_progress(th_fetch_config *cfg, uintptr_t handle, uint32_t interval_ms);
*/
import "C"

import "runtime/cgo"

// progressCall is one fetch's FetchOptions.Progress, named to the C
// trampoline by a cgo.Handle. The library calls it on the thread that called
// th_fetch, so the fetching goroutine itself runs fn, between transfers.
type progressCall struct {
	fn     func(done, total uint64)
	cancel *C.th_cancel // the fetch's: signalled once fn panicked
	handle cgo.Handle

	// A panic in fn must not unwind through the library's C++ frames (its
	// locks and destructors would be skipped): the trampoline recovers it
	// here, fn is not called again, and the fetch re-panics once th_fetch
	// returned.
	panicked bool
	value    any
}

// setProgress makes raw call fn (at most every interval; 0 keeps the
// library's default) until the returned progressCall is freed. cancel is
// the fetch's cancellation token, which a panic in fn signals so that the
// fetch ends soon instead of running to its end for nobody.
func setProgress(raw *C.th_fetch_config, fn func(done, total uint64), interval C.uint32_t,
	cancel *C.th_cancel) *progressCall {
	p := &progressCall{fn: fn, cancel: cancel}
	p.handle = cgo.NewHandle(p)
	C.th_go_set_progress(raw, C.uintptr_t(p.handle), interval)
	return p
}

// free forgets the handle; the library no longer calls it once th_fetch
// returned.
func (p *progressCall) free() {
	if p != nil {
		p.handle.Delete()
	}
}

// recovered is the value fn panicked with, if it did.
func (p *progressCall) recovered() (any, bool) {
	if p == nil || !p.panicked {
		return nil, false
	}
	return p.value, true
}

// report runs fn, recording a panic (even panic(nil)) instead of letting it
// unwind into C; once fn panicked, it is not called again.
func (p *progressCall) report(done, total uint64) {
	if p.panicked {
		return
	}
	returned := false
	defer func() {
		if !returned {
			p.panicked, p.value = true, recover()
			C.th_cancel_signal(p.cancel)
		}
	}()
	p.fn(done, total)
	returned = true
}

//export goTensorhubProgress
func goTensorhubProgress(done, total C.uint64_t, handle C.uintptr_t) {
	if p, ok := cgo.Handle(handle).Value().(*progressCall); ok {
		p.report(uint64(done), uint64(total))
	}
}
