#include "bench_memory.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <utility>
#include <vector>

#include "pattern.hpp"

#ifdef TH_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace th_bench {

namespace {

#ifdef TH_WITH_CUDA
void cuda_check(cudaError_t err, const char *what) {
    if (err != cudaSuccess) fail(what, ": ", cudaGetErrorString(err));
}
#else
[[noreturn]] void no_cuda() { fail("CUDA buffers, but this benchmark was built without CUDA (TH_WITH_CUDA=OFF)"); }
#endif

}  // namespace

const char *memory_name(Memory m) { return m == Memory::Host ? "host" : "cuda"; }

bool cuda_usable() {
#ifdef TH_WITH_CUDA
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
#else
    return false;
#endif
}

Buffer::Buffer(size_t n, Memory memory) : memory_(memory), size_(n) {
    if (memory == Memory::Host) {
        host_ = PageBuffer(n);
        return;
    }
#ifdef TH_WITH_CUDA
    void *p = nullptr;
    cuda_check(cudaMalloc(&p, n), "cudaMalloc");
    device_ = static_cast<uint8_t *>(p);
#else
    no_cuda();
#endif
}

Buffer::Buffer(Buffer &&o) noexcept
    : memory_(o.memory_), size_(std::exchange(o.size_, 0)), host_(std::move(o.host_)),
      device_(std::exchange(o.device_, nullptr)) {}

Buffer &Buffer::operator=(Buffer &&o) noexcept {
    std::swap(memory_, o.memory_);
    std::swap(size_, o.size_);
    std::swap(host_, o.host_);
    std::swap(device_, o.device_);
    return *this;
}

Buffer::~Buffer() { free_device(); }

void Buffer::free_device() {
#ifdef TH_WITH_CUDA
    if (device_ != nullptr) cudaFree(device_);
#endif
    device_ = nullptr;
}

void Buffer::clear() {
    if (memory_ == Memory::Host) return host_.clear();
#ifdef TH_WITH_CUDA
    cuda_check(cudaMemset(device_, 0, size_), "cudaMemset");
    cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
#else
    no_cuda();
#endif
}

void Buffer::require_range(size_t off, size_t n, const char *what) const {
    if (off > size_ || n > size_ - off) fail(what, " of ", n, " bytes at ", off, " does not fit in ", size_);
}

void Buffer::fill(uint64_t seed, size_t off, size_t n) {
    require_range(off, n, "a pattern");
    if (memory_ == Memory::Host) return th_support::fill_pattern(host_.data() + off, n, seed);
#ifdef TH_WITH_CUDA
    PageBuffer stage(n);
    th_support::fill_pattern(stage.data(), n, seed);
    cuda_check(cudaMemcpy(device_ + off, stage.data(), n, cudaMemcpyHostToDevice), "copying the pattern to the device");
#else
    no_cuda();
#endif
}

size_t Buffer::check(uint64_t seed, size_t off, size_t n) const {
    require_range(off, n, "a check");
    if (memory_ == Memory::Host) return th_support::check_pattern(host_.data() + off, n, seed);
#ifdef TH_WITH_CUDA
    PageBuffer stage(n);
    cuda_check(cudaMemcpy(stage.data(), device_ + off, n, cudaMemcpyDeviceToHost), "copying the buffer to the host");
    return th_support::check_pattern(stage.data(), n, seed);
#else
    no_cuda();
#endif
}

double Buffer::physically_contiguous() const {
    const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    if (memory_ != Memory::Host || size_ < 2 * page) return -1;
    int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    const uint64_t first = reinterpret_cast<uintptr_t>(host_.data()) / page;
    std::vector<uint64_t> entries(size_ / page);
    ssize_t want = static_cast<ssize_t>(entries.size() * sizeof(uint64_t));
    ssize_t got = pread(fd, entries.data(), want, static_cast<off_t>(first * sizeof(uint64_t)));
    close(fd);
    if (got != want) return -1;
    const uint64_t present = 1ull << 63, pfn_mask = (1ull << 55) - 1;
    uint64_t pairs = 0, following = 0;
    for (size_t i = 1; i < entries.size(); ++i) {
        uint64_t a = entries[i - 1], b = entries[i];
        if (!(a & present) || !(b & present)) continue;
        if ((a & pfn_mask) == 0 || (b & pfn_mask) == 0) return -1;  // hidden: not privileged
        ++pairs;
        following += (b & pfn_mask) == (a & pfn_mask) + 1;
    }
    return pairs ? double(following) / double(pairs) : -1;
}

}  // namespace th_bench
