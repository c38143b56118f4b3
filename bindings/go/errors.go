package tensorhub

/*
#include "tensorhub/tensorhub.h"
*/
import "C"

// Status is a library status code (th_status). The numbers are stable.
type Status int32

const (
	StatusOK             Status = C.TH_OK
	StatusInvalidArg     Status = C.TH_ERR_INVALID_ARG
	StatusNotFound       Status = C.TH_ERR_NOT_FOUND
	StatusNotCommitted   Status = C.TH_ERR_NOT_COMMITTED
	StatusLayoutMismatch Status = C.TH_ERR_LAYOUT_MISMATCH
	StatusConflict       Status = C.TH_ERR_CONFLICT
	StatusTimeout        Status = C.TH_ERR_TIMEOUT
	StatusUnavailable    Status = C.TH_ERR_UNAVAILABLE
	StatusTransport      Status = C.TH_ERR_TRANSPORT
	StatusProtocol       Status = C.TH_ERR_PROTOCOL
	StatusNoMemory       Status = C.TH_ERR_NO_MEMORY
	StatusClosed         Status = C.TH_ERR_CLOSED
	StatusUnsupported    Status = C.TH_ERR_UNSUPPORTED
	StatusInternal       Status = C.TH_ERR_INTERNAL
	StatusRetained       Status = C.TH_ERR_RETAINED
	StatusAuth           Status = C.TH_ERR_AUTH
	StatusCanceled       Status = C.TH_ERR_CANCELED
)

// String is the library's name for the status, e.g. "not found".
func (s Status) String() string { return C.GoString(C.th_status_str(C.th_status(s))) }

// Error is a failed call: its status and the library's message.
type Error struct {
	code  Status
	msg   string
	cause error // the context error when ctx's deadline caused a timeout, or ctx canceled a fetch
}

func newError(code Status, msg string) *Error { return &Error{code: code, msg: msg} }

// Code is the status of the failure.
func (e *Error) Code() Status { return e.code }

// Message is the library's message without the status prefix.
func (e *Error) Message() string { return e.msg }

func (e *Error) Error() string {
	if e.msg == "" {
		return "tensorhub: " + e.code.String()
	}
	return "tensorhub: " + e.code.String() + ": " + e.msg
}

// Is makes errors.Is(err, ErrNotFound) true for every error with that status.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.code == e.code
}

// Unwrap exposes context.DeadlineExceeded when ctx's deadline caused a timeout,
// and ctx's error when ctx ended a fetch (ErrCanceled).
func (e *Error) Unwrap() error { return e.cause }

// Sentinels for errors.Is; they match by status only.
var (
	ErrInvalidArg     = newError(StatusInvalidArg, "")
	ErrNotFound       = newError(StatusNotFound, "")
	ErrNotCommitted   = newError(StatusNotCommitted, "")
	ErrLayoutMismatch = newError(StatusLayoutMismatch, "")
	ErrConflict       = newError(StatusConflict, "")
	ErrTimeout        = newError(StatusTimeout, "")
	ErrUnavailable    = newError(StatusUnavailable, "")
	ErrTransport      = newError(StatusTransport, "")
	ErrProtocol       = newError(StatusProtocol, "")
	ErrNoMemory       = newError(StatusNoMemory, "")
	ErrClosed         = newError(StatusClosed, "")
	ErrUnsupported    = newError(StatusUnsupported, "")
	ErrInternal       = newError(StatusInternal, "")
	ErrRetained       = newError(StatusRetained, "")
	ErrAuth           = newError(StatusAuth, "")
	ErrCanceled       = newError(StatusCanceled, "")
)
