package tensorhub

/*
#include <stdint.h>
#include "tensorhub/tensorhub.h"

void th_go_set_log_handler(uintptr_t handler);
*/
import "C"

import (
	"fmt"
	"runtime/cgo"
	"sync"
)

// LogLevel says how much the library logs: lines above the level in force
// are not logged.
type LogLevel int

const (
	LogError LogLevel = iota
	LogWarn           // the default, or $TENSORHUB_LOG_LEVEL's (error, warn, info, debug)
	LogInfo
	LogDebug
)

func (l LogLevel) String() string {
	switch l {
	case LogError:
		return "error"
	case LogWarn:
		return "warn"
	case LogInfo:
		return "info"
	case LogDebug:
		return "debug"
	}
	return fmt.Sprintf("LogLevel(%d)", int(l))
}

var (
	logMu      sync.Mutex
	logHandler cgo.Handle // what the library was given; 0: none
)

// SetLogHandler sends every log line of this process's tensorhub clients and
// servers to handler(level, message) instead of stderr, UCX's warnings and
// errors included (at LogInfo, as "ucx: ..."); nil sends them to stderr
// again. The handler runs on library threads, possibly several at once, and
// must not call into tensorhub; a panic in it drops the line. Returns once no
// call to the previous handler is running.
func SetLogHandler(handler func(level LogLevel, message string)) {
	logMu.Lock()
	defer logMu.Unlock()
	var next cgo.Handle
	if handler != nil {
		next = cgo.NewHandle(handler)
	}
	C.th_go_set_log_handler(C.uintptr_t(next))
	if logHandler != 0 {
		logHandler.Delete() // no longer called
	}
	logHandler = next
}

// SetLogLevel makes lines above level go unlogged from now on.
func SetLogLevel(level LogLevel) error {
	return call(func() C.th_status { return C.th_set_log_level(C.th_log_level(level)) })
}

// CurrentLogLevel is the level in force.
func CurrentLogLevel() LogLevel { return LogLevel(C.th_get_log_level()) }

//export goTensorhubLog
func goTensorhubLog(level C.int, message *C.char, handler C.uintptr_t) {
	h, ok := cgo.Handle(handler).Value().(func(LogLevel, string))
	if !ok {
		return
	}
	defer func() { _ = recover() }() // a panic must not unwind into C
	h(LogLevel(level), C.GoString(message))
}
