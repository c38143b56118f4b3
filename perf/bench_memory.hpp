// Where a benchmark's buffers live: host pages, or CUDA device memory when
// the benchmark is built with CUDA and a device is present. Patterns are
// written and checked on the host; device buffers are filled and checked
// through a host copy (untimed steps).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "bench_util.hpp"
#include "tensorhub/tensorhub.h"

namespace th_bench {

enum class Memory { Host, Cuda };

const char *memory_name(Memory m);
// True when CUDA buffers can be made here (built with CUDA, a device present).
bool cuda_usable();

class Buffer {
  public:
    Buffer() = default;
    Buffer(size_t n, Memory memory);
    Buffer(Buffer &&o) noexcept;
    Buffer &operator=(Buffer &&o) noexcept;
    Buffer(const Buffer &) = delete;
    Buffer &operator=(const Buffer &) = delete;
    ~Buffer();

    uint8_t *data() const { return memory_ == Memory::Host ? host_.data() : device_; }
    size_t size() const { return size_; }
    Memory memory() const { return memory_; }
    th_mem_kind kind() const { return memory_ == Memory::Host ? TH_MEM_HOST : TH_MEM_CUDA; }

    // Zeroes the buffer (host: faults every page in, so page faults stay out
    // of the timed transfer).
    void clear();
    // Writes th_support's pattern for seed over [off, off + n) (a tensor of a
    // shard); check's answer: the first wrong offset in that range, or n when
    // all of it matches.
    void fill(uint64_t seed, size_t off, size_t n);
    size_t check(uint64_t seed, size_t off, size_t n) const;
    // Of the buffer's host pages, the fraction that directly follow the page
    // before them in physical memory (/proc/self/pagemap): how scattered the
    // pages are, which changes what a cma copy of them costs. -1 where it
    // cannot be known (device memory; page frame numbers need CAP_SYS_ADMIN).
    double physically_contiguous() const;

  private:
    void free_device();
    void require_range(size_t off, size_t n, const char *what) const;

    Memory memory_ = Memory::Host;
    size_t size_ = 0;
    PageBuffer host_;
    uint8_t *device_ = nullptr;
};

}  // namespace th_bench
