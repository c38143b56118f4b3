package tensorhub

/*
#include <stdlib.h>
#include "tensorhub/tensorhub.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// DType is a tensor element type (th_dtype). The numbers are stable; they are
// the "dtype_id" of Describe's JSON.
type DType int32

const (
	UInt8      DType = C.TH_DTYPE_UINT8
	Int8       DType = C.TH_DTYPE_INT8
	Int16      DType = C.TH_DTYPE_INT16
	Int32      DType = C.TH_DTYPE_INT32
	Int64      DType = C.TH_DTYPE_INT64
	Float16    DType = C.TH_DTYPE_FLOAT16
	BFloat16   DType = C.TH_DTYPE_BFLOAT16
	Float32    DType = C.TH_DTYPE_FLOAT32
	Float64    DType = C.TH_DTYPE_FLOAT64
	Bool       DType = C.TH_DTYPE_BOOL
	Float8E4M3 DType = C.TH_DTYPE_FLOAT8_E4M3
	Float8E5M2 DType = C.TH_DTYPE_FLOAT8_E5M2
	UInt16     DType = C.TH_DTYPE_UINT16
	UInt32     DType = C.TH_DTYPE_UINT32
	UInt64     DType = C.TH_DTYPE_UINT64
)

// Size is the size of one element in bytes, 0 for an unknown dtype.
func (d DType) Size() int { return int(C.th_dtype_size(C.th_dtype(d))) }

// Tensor is one named tensor; its bytes are all of Data.
type Tensor struct {
	Name  string
	DType DType
	Shape []int64
	Data  *Buffer
}

// BytesTensor is a flat uint8 tensor over all of b.
func BytesTensor(name string, b *Buffer) Tensor {
	return Tensor{Name: name, DType: UInt8, Shape: []int64{int64(b.Len())}, Data: b}
}

// cTensors is a th_tensor array in C memory (cgo forbids Go memory that C
// reads through pointers stored in C memory) together with what it holds:
// the C names, freed after the call, and the buffers, acquired for the call.
type cTensors struct {
	arr  *C.th_tensor
	n    int
	bufs []*Buffer
}

func newCTensors(tensors []Tensor) (*cTensors, error) {
	if len(tensors) == 0 {
		return nil, newError(StatusInvalidArg, "no tensors given")
	}
	ct := &cTensors{
		arr: (*C.th_tensor)(C.calloc(C.size_t(len(tensors)), C.size_t(unsafe.Sizeof(C.th_tensor{})))),
		n:   len(tensors),
	}
	if ct.arr == nil {
		panic("tensorhub: out of memory")
	}
	raw := unsafe.Slice(ct.arr, ct.n)
	for i, t := range tensors {
		if err := ct.fill(&raw[i], t); err != nil {
			ct.free(true)
			return nil, err
		}
	}
	return ct, nil
}

func (ct *cTensors) fill(raw *C.th_tensor, t Tensor) error {
	if len(t.Shape) > C.TH_MAX_DIMS {
		return newError(StatusInvalidArg, fmt.Sprintf("tensor '%s' has ndim %d > %d", t.Name, len(t.Shape), C.TH_MAX_DIMS))
	}
	if t.Data == nil {
		return newError(StatusInvalidArg, fmt.Sprintf("tensor '%s' has no buffer", t.Name))
	}
	name, err := cString("tensor name", t.Name)
	if err != nil {
		return err
	}
	raw.name = name // from here on, free() frees it
	ptr, err := t.Data.acquire()
	if err != nil {
		return newError(StatusInvalidArg, fmt.Sprintf("tensor '%s': %s", t.Name, err.(*Error).msg))
	}
	ct.bufs = append(ct.bufs, t.Data)
	raw.dtype = C.th_dtype(t.DType)
	raw.ndim = C.uint32_t(len(t.Shape))
	for d, v := range t.Shape {
		raw.shape[d] = C.int64_t(v)
	}
	raw.data = ptr
	raw.nbytes = C.uint64_t(t.Data.Len())
	raw.mem_kind = C.TH_MEM_HOST
	return nil
}

// free releases the C array and names; with releaseBufs also the buffers
// (false when a replica now owns those references).
func (ct *cTensors) free(releaseBufs bool) {
	for _, t := range unsafe.Slice(ct.arr, ct.n) {
		C.free(unsafe.Pointer(t.name)) // NULL for entries not filled
	}
	C.free(unsafe.Pointer(ct.arr))
	if releaseBufs {
		releaseAll(ct.bufs)
	}
}
