package tensorhub

/*
#include <stdlib.h>
*/
import "C"

import (
	"sync"
	"unsafe"
)

// Buffer is host memory outside the Go heap, so the library may keep using it
// after a call returns (serving it to other processes), which cgo does not
// allow for Go memory. It is never freed implicitly: a slice from Bytes must
// not outlive Close, and Close refuses while a Replica serves the buffer.
type Buffer struct {
	mu   sync.Mutex
	ptr  unsafe.Pointer
	n    int
	refs int // calls in flight and live replicas using the buffer
}

// NewBuffer allocates n zeroed bytes. Like make, it panics if memory runs out.
func NewBuffer(n int) *Buffer {
	if n < 0 {
		panic("tensorhub: NewBuffer: negative size")
	}
	size := n
	if size == 0 {
		size = 1 // calloc(0) may return NULL, which the library rejects
	}
	ptr := C.calloc(C.size_t(size), 1)
	if ptr == nil {
		panic("tensorhub: NewBuffer: out of memory")
	}
	return &Buffer{ptr: ptr, n: n}
}

// Bytes is the buffer's memory (nil once closed). While a Replica serves the
// buffer, other processes read it: do not write it until the replica is closed.
func (b *Buffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ptr == nil {
		return nil
	}
	return unsafe.Slice((*byte)(b.ptr), b.n)
}

// Len is the size in bytes.
func (b *Buffer) Len() int { return b.n }

// Close frees the memory. It fails with ErrInvalidArg while a Replica still
// serves the buffer (close the replica first); closing twice is a no-op.
func (b *Buffer) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ptr == nil {
		return nil
	}
	if b.refs > 0 {
		return newError(StatusInvalidArg, "buffer is still in use by a replica or a call in flight")
	}
	C.free(b.ptr)
	b.ptr = nil
	return nil
}

// acquire pins the memory for a call (and, if kept, for a replica's life).
func (b *Buffer) acquire() (unsafe.Pointer, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ptr == nil {
		return nil, newError(StatusInvalidArg, "buffer is closed")
	}
	b.refs++
	return b.ptr, nil
}

func (b *Buffer) release() {
	b.mu.Lock()
	b.refs--
	b.mu.Unlock()
}

// releaseAll drops one reference from each buffer.
func releaseAll(bufs []*Buffer) {
	for _, b := range bufs {
		b.release()
	}
}
