#include "transport/memory_kind.hpp"

#include <cstring>

#include "common/error.hpp"

#ifdef TH_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace th {

bool cuda_available() {
#ifdef TH_WITH_CUDA
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
#else
    return false;
#endif
}

namespace {

void copy(void *dst, const void *src, uint64_t n, bool cuda, bool to_device) {
    if (!cuda) {
        std::memcpy(dst, src, n);
        return;
    }
#ifdef TH_WITH_CUDA
    cudaError_t err = cudaMemcpy(dst, src, n, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost);
    if (err != cudaSuccess)
        fail(TH_ERR_TRANSPORT, to_device ? "copying host memory to CUDA memory: " : "copying CUDA memory to host: ",
             cudaGetErrorString(err));
#else
    (void)to_device;
    fail(TH_ERR_UNSUPPORTED, "CUDA memory, but this libtensorhub was built without CUDA");
#endif
}

}  // namespace

void copy_to_host(void *dst, const void *src, uint64_t n, th_mem_kind kind) {
    copy(dst, src, n, kind == TH_MEM_CUDA, /*to_device=*/false);
}

void copy_from_host(void *dst, const void *src, uint64_t n, th_mem_kind kind) {
    copy(dst, src, n, kind == TH_MEM_CUDA, /*to_device=*/true);
}

void check_memory_kind(const void *ptr, th_mem_kind kind) {
    // Host buffers are not checked: asking the CUDA runtime would initialise
    // it in programs that never use a GPU.
    if (kind != TH_MEM_CUDA) return;
#ifndef TH_WITH_CUDA
    (void)ptr;
    fail(TH_ERR_UNSUPPORTED, "CUDA memory given, but this libtensorhub was built without CUDA (TH_WITH_CUDA=OFF)");
#else
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess || n == 0)
        fail(TH_ERR_UNSUPPORTED, "CUDA memory given, but no CUDA device is usable: ",
             err != cudaSuccess ? cudaGetErrorString(err) : "no device");
    cudaPointerAttributes attr{};
    err = cudaPointerGetAttributes(&attr, ptr);
    if (err != cudaSuccess) fail(TH_ERR_INVALID_ARG, "cannot query CUDA pointer: ", cudaGetErrorString(err));
    if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged)
        fail(TH_ERR_INVALID_ARG, "buffer declared as CUDA memory is not CUDA device memory");
#endif
}

}  // namespace th
