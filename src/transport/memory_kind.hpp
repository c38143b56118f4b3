// Checks that a buffer really is the kind of memory the caller says it is,
// before it is registered: a host pointer passed as CUDA memory (or the other
// way round) would otherwise fail deep inside UCX, or worse, be misread.
#pragma once

#include <cstdint>

#include "tensorhub/tensorhub.h"

namespace th {

// Throws Error(TH_ERR_UNSUPPORTED) for CUDA memory when the library was built
// without CUDA or no device is usable, Error(TH_ERR_INVALID_ARG) when the
// pointer is not of the given kind.
void check_memory_kind(const void *ptr, th_mem_kind kind);

// Copies n bytes of memory of the given kind into host memory at dst.
void copy_to_host(void *dst, const void *src, uint64_t n, th_mem_kind kind);
// Copies n bytes of host memory at src into memory of the given kind.
void copy_from_host(void *dst, const void *src, uint64_t n, th_mem_kind kind);

// True when CUDA device memory can be used (built with CUDA and a device is
// present). Never throws.
bool cuda_available();

}  // namespace th
