// Package tensorhub is the Go binding of libtensorhub: it moves LLM weights
// between the processes of an RL job. A metadata Server tracks which workers
// hold a weight version; a Client publishes its buffers (nothing is copied)
// and fetches versions straight from the memory of the processes holding them.
//
// Memory: the library keeps using published and served buffers after the call
// returns, which cgo forbids for Go memory. Every tensor therefore lives in a
// *Buffer, allocated with C.malloc and freed by Buffer.Close, which refuses
// while a Replica still serves it.
//
// Building: cgo finds libtensorhub through pkg-config (tensorhub.pc, installed
// by cmake --install; a build tree has tensorhub-uninstalled.pc): point
// PKG_CONFIG_PATH at the folder that holds it.
//
// Every handle has an explicit, idempotent Close. Errors are *Error values;
// compare them with errors.Is(err, ErrNotFound) and friends.
package tensorhub

/*
#cgo pkg-config: tensorhub
#include <stdlib.h>
#include "tensorhub/tensorhub.h"
*/
import "C"

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"strings"
	"time"
	"unsafe"
)

// Latest names the newest committed version wherever a version is expected.
const Latest uint64 = math.MaxUint64

// call runs f, which makes exactly one C call, and turns its status into an
// error. The message lives in C thread-local storage, so the goroutine must
// stay on the OS thread that made the call until the message has been read.
func call(f func() C.th_status) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	st := f()
	if st == C.TH_OK {
		return nil
	}
	return &Error{code: Status(st), msg: C.GoString(C.th_last_error())}
}

// cString copies s for a C call; free it with freeString. A NUL byte would
// silently cut the value short on the C side, so it is rejected instead.
func cString(what, s string) (*C.char, error) {
	if strings.IndexByte(s, 0) >= 0 {
		return nil, newError(StatusInvalidArg, fmt.Sprintf("%s contains a NUL byte: %q", what, s))
	}
	return C.CString(s), nil
}

func freeString(s *C.char) { C.free(unsafe.Pointer(s)) }

// takeString copies a library-allocated string and frees it.
func takeString(s *C.char) string {
	defer C.th_free(unsafe.Pointer(s))
	return C.GoString(s)
}

// stringSetting is a string field of a C config; "" keeps what the config's
// init function put there (the library's default, or NULL).
type stringSetting struct {
	what, value string
	field       **C.char
}

// setStrings sets each non-empty setting to a C copy of its value; free
// releases them once the config is no longer used (also after an error).
func setStrings(settings []stringSetting) (free func(), err error) {
	var made []*C.char
	free = func() {
		for _, cs := range made {
			freeString(cs)
		}
	}
	for _, s := range settings {
		if s.value == "" {
			continue
		}
		cs, err := cString(s.what, s.value)
		if err != nil {
			return free, err
		}
		made = append(made, cs)
		*s.field = cs
	}
	return free, nil
}

// durationSetting is a millisecond field of a C config; 0 keeps the default.
type durationSetting struct {
	what  string
	value time.Duration
	field *C.uint32_t
}

// setDurations sets each nonzero setting (see millis).
func setDurations(settings []durationSetting) error {
	for _, d := range settings {
		ms, err := millis(d.value, d.what)
		if err != nil {
			return err
		}
		if ms != 0 {
			*d.field = ms
		}
	}
	return nil
}

// millis converts a Go duration to a C uint32 millisecond field. Zero keeps
// the library default; anything else is rounded up (so a tiny timeout never
// turns into 0, which means "default") and saturated.
func millis(d time.Duration, field string) (C.uint32_t, error) {
	switch {
	case d < 0:
		return 0, newError(StatusInvalidArg, field+" is negative")
	case d == 0:
		return 0, nil
	}
	ms := (d + time.Millisecond - 1) / time.Millisecond
	if ms > math.MaxUint32 {
		ms = math.MaxUint32
	}
	return C.uint32_t(ms), nil
}

// deadline is the C timeout for a call bounded by ctx: the time left until
// ctx's deadline, or fallback (0 lets the library choose) without one.
func deadline(ctx context.Context, fallback C.uint32_t) (C.uint32_t, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	d, ok := ctx.Deadline()
	if !ok {
		return fallback, nil
	}
	left := time.Until(d)
	if left <= 0 {
		return 0, context.DeadlineExceeded
	}
	return millis(left, "deadline")
}

// withContext marks a library timeout as caused by ctx's deadline, so that
// errors.Is(err, context.DeadlineExceeded) holds as well as ErrTimeout. The C
// timeout was ctx's remaining time, so the deadline is the cause even if
// ctx's own timer has not fired yet (ctx.Err() may still be nil).
func withContext(ctx context.Context, err error) error {
	if e, ok := err.(*Error); ok && e.code == StatusTimeout {
		if _, has := ctx.Deadline(); has {
			e.cause = context.DeadlineExceeded
		}
	}
	// A fetch ended by ctx (cancelOnDone): errors.Is(err, context.Canceled)
	// holds as well as ErrCanceled.
	if e, ok := err.(*Error); ok && e.code == StatusCanceled && ctx.Err() != nil {
		e.cause = ctx.Err()
	}
	return err
}

// Version is the loaded library's version, "MAJOR.MINOR.PATCH".
func Version() string { return C.GoString(C.th_version()) }

// HeaderVersionNumber is the TH_VERSION_NUMBER of the header this package
// was built against: MAJOR*10000 + MINOR*100 + PATCH.
const HeaderVersionNumber uint32 = C.TH_VERSION_NUMBER

// VersionNumber is the loaded library's TH_VERSION_NUMBER, which may differ
// from HeaderVersionNumber when the shared library was replaced after the
// build: compare them to require a library at least as new as the header.
func VersionNumber() uint32 { return uint32(C.th_version_number()) }
