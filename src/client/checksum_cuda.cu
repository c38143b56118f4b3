#include "client/checksum_cuda.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>

#include "client/xxh3_leaf.hpp"
#include "common/error.hpp"

namespace th {

namespace {

__constant__ xxh3::LeafKeys c_keys;

constexpr unsigned kThreads = 256;  // 32 leaves per block

// A run of whole leaves in device memory, and where its hashes go among the
// launch's: leaves [first, first + count of the next run).
struct Run {
    const uint8_t *base;
    uint64_t first;
};

// Eight threads per leaf, one per accumulator lane (xxh3_leaf.hpp): lane l
// reads bytes 8l..8l+7 of each stripe, so the eight read 64 contiguous bytes
// together, and takes its partner's word by a shuffle. A block's 16 stripes
// are loaded before they are used, which keeps loads in flight. One launch
// hashes every run a hasher queued: `runs` sorted by first, `total` leaves.
__global__ void leaf_hash_kernel(const Run *runs, unsigned nruns, uint64_t total, uint64_t *out) {
    using namespace xxh3;
    using namespace xxh3::lane;
    uint64_t t = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    // A group past the end hashes the last leaf again and writes nothing:
    // every thread of a warp takes part in its shuffles.
    uint64_t leaf = t / kLanes < total ? t / kLanes : total - 1;
    unsigned l = threadIdx.x % kLanes;
    unsigned lo = 0, hi = nruns;  // the run holding leaf: the last with first <= leaf
    while (hi - lo > 1) {
        unsigned mid = (lo + hi) / 2;
        if (runs[mid].first <= leaf) lo = mid; else hi = mid;
    }
    const uint8_t *p = runs[lo].base + (leaf - runs[lo].first) * kLeafBytes + 8 * l;
    // The groups of one warp may read runs of different alignment: the
    // branch is in the load only, so the warp meets again at each shuffle.
    const bool aligned = reinterpret_cast<uintptr_t>(p) % 8 == 0;
    auto load = [&](uint64_t at) { return aligned ? load64<true>(p + at) : load64<false>(p + at); };
    uint64_t key[kStripesPerBlock];
#pragma unroll
    for (unsigned s = 0; s < kStripesPerBlock; ++s) key[s] = c_keys.stripe[s][l];
    uint64_t acc = init(l);
    uint64_t v[kStripesPerBlock];
#pragma unroll 1
    for (unsigned b = 0; b <= kFullBlocks; ++b) {
        unsigned n = b < kFullBlocks ? kStripesPerBlock : kTailStripes;
#pragma unroll
        for (unsigned s = 0; s < kStripesPerBlock; ++s)
            if (s < n) v[s] = load(stripe_offset(b, s));
#pragma unroll
        for (unsigned s = 0; s < kStripesPerBlock; ++s)
            if (s < n) acc = stripe(acc, v[s], __shfl_xor_sync(0xffffffffu, v[s], 1), key[s]);
        if (b < kFullBlocks) acc = scramble(acc, c_keys.scramble[l]);
    }
    uint64_t last = load(kLastStripe);
    acc = stripe(acc, last, __shfl_xor_sync(0xffffffffu, last, 1), c_keys.last[l]);
    uint64_t odd = __shfl_xor_sync(0xffffffffu, acc, 1);
    uint64_t folded = l % 2 == 0 ? fold_pair(acc, odd, c_keys.merge[l], c_keys.merge[l + 1]) : 0;
    folded += __shfl_xor_sync(0xffffffffu, folded, 2);
    folded += __shfl_xor_sync(0xffffffffu, folded, 4);
    if (l == 0 && t / kLanes < total) out[leaf] = finish(folded);
}

void check(cudaError_t err, const char *what) {
    if (err != cudaSuccess) fail(TH_ERR_TRANSPORT, "checksum of CUDA memory: ", what, ": ", cudaGetErrorString(err));
}

// Makes `device` current for a scope, as the caller's thread had it before.
class OnDevice {
  public:
    explicit OnDevice(int device) {
        check(cudaGetDevice(&before_), "cudaGetDevice");
        if (before_ != device) check(cudaSetDevice(device), "cudaSetDevice");
    }
    ~OnDevice() {
        int now = -1;
        if (cudaGetDevice(&now) == cudaSuccess && now != before_) cudaSetDevice(before_);
    }

  private:
    int before_ = 0;
};

// Grows a buffer made by alloc / freed by release to hold at least n bytes.
template <typename Alloc, typename Release>
void grow(uint8_t *&buf, uint64_t &cap, uint64_t n, Alloc alloc, Release release, const char *what) {
    if (n <= cap) return;
    if (buf != nullptr) release(buf);
    buf = nullptr;
    cap = std::max(n, 2 * cap);
    void *p = nullptr;
    check(alloc(&p, cap), what);
    buf = static_cast<uint8_t *>(p);
}

}  // namespace

// A stream of the device (blocking, so that it follows work the program
// queued on the legacy default stream, as a plain cudaMemcpy did), device
// scratch for the run table and the leaf hashes, and pinned host memory the
// table is written to and the hashes and gathered bytes land in. Used by one
// hasher at a time; never freed (the pool keeps it for the next checksum,
// and freeing at exit races the CUDA runtime's own teardown).
struct CudaLeafHasher::Lane {
    int device = 0;
    cudaStream_t stream = nullptr;
    uint8_t *scratch = nullptr;  // device: the run table, then the hashes
    uint64_t scratch_bytes = 0;
    uint8_t *pinned = nullptr;  // host: the same layout, then gathered bytes
    uint64_t pinned_bytes = 0;
    struct Job {
        const uint8_t *base;
        uint64_t count;
        uint64_t *out;
    };
    std::vector<Job> jobs;  // leaves to hash at the next wait
    struct Copy {
        void *dst;
        const void *device;
        uint64_t n;
    };
    std::vector<Copy> copies;  // bytes to gather at the next wait

    void wait() {
        uint64_t leaves = 0;
        for (const Job &j : jobs) leaves += j.count;
        uint64_t table = (jobs.size() * sizeof(Run) + 15) & ~uint64_t{15};
        uint64_t hashes = leaves * sizeof(uint64_t);
        uint64_t gathered = 0;
        for (const Copy &c : copies) gathered += (c.n + 15) & ~uint64_t{15};
        grow(
            scratch, scratch_bytes, table + hashes, [](void **p, uint64_t n) { return cudaMalloc(p, n); },
            [](void *p) { cudaFree(p); }, "cudaMalloc");
        grow(
            pinned, pinned_bytes, table + hashes + gathered, [](void **p, uint64_t n) { return cudaMallocHost(p, n); },
            [](void *p) { cudaFreeHost(p); }, "cudaMallocHost");
        uint8_t *land = pinned + table + hashes;
        for (const Copy &c : copies) {
            check(cudaMemcpyAsync(land, c.device, c.n, cudaMemcpyDeviceToHost, stream), "copying CUDA memory to the host");
            land += (c.n + 15) & ~uint64_t{15};
        }
        if (leaves > 0) {
            auto *runs = reinterpret_cast<Run *>(pinned);
            uint64_t first = 0;
            for (size_t i = 0; i < jobs.size(); ++i) {
                runs[i] = {jobs[i].base, first};
                first += jobs[i].count;
            }
            check(cudaMemcpyAsync(scratch, pinned, jobs.size() * sizeof(Run), cudaMemcpyHostToDevice, stream),
                  "copying the leaf table to the device");
            auto *out = reinterpret_cast<uint64_t *>(scratch + table);
            uint64_t blocks = (leaves * xxh3::kLanes + kThreads - 1) / kThreads;
            leaf_hash_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
                reinterpret_cast<const Run *>(scratch), static_cast<unsigned>(jobs.size()), leaves, out);
            check(cudaGetLastError(), "launching the leaf hash kernel");
            check(cudaMemcpyAsync(pinned + table, out, hashes, cudaMemcpyDeviceToHost, stream),
                  "copying leaf hashes to the host");
        }
        cudaError_t err = cudaStreamSynchronize(stream);
        if (err == cudaSuccess) {
            const auto *h = reinterpret_cast<const uint64_t *>(pinned + table);
            for (const Job &j : jobs) {
                std::memcpy(j.out, h, j.count * sizeof(uint64_t));
                h += j.count;
            }
            land = pinned + table + hashes;
            for (const Copy &c : copies) {
                std::memcpy(c.dst, land, c.n);
                land += (c.n + 15) & ~uint64_t{15};
            }
        }
        jobs.clear();
        copies.clear();
        check(err, "waiting for the device");
    }
};

namespace {

std::mutex pool_mu;
std::vector<CudaLeafHasher::Lane *> pool;  // idle lanes, any device

CudaLeafHasher::Lane *lease(int device) {
    {
        std::lock_guard lk(pool_mu);
        for (auto it = pool.begin(); it != pool.end(); ++it)
            if ((*it)->device == device) {
                CudaLeafHasher::Lane *l = *it;
                pool.erase(it);
                return l;
            }
    }
    auto *l = new CudaLeafHasher::Lane;
    l->device = device;
    OnDevice on(device);
    check(cudaStreamCreate(&l->stream), "cudaStreamCreate");
    // Per device: each has its own constant memory. Uploaded on the lane's
    // stream, so the first kernel sees it.
    check(cudaMemcpyToSymbolAsync(c_keys, &xxh3::leaf_keys(), sizeof(xxh3::LeafKeys), 0, cudaMemcpyHostToDevice,
                                  l->stream),
          "uploading the hash's keys");
    return l;
}

}  // namespace

CudaLeafHasher::~CudaLeafHasher() {
    for (auto &[device, lane] : lanes_) {
        // A lane whose work failed or is still queued is not reused.
        if (cudaStreamSynchronize(lane->stream) != cudaSuccess) continue;
        lane->jobs.clear();
        lane->copies.clear();
        std::lock_guard lk(pool_mu);
        pool.push_back(lane);
    }
}

CudaLeafHasher::Lane &CudaLeafHasher::lane_for(const void *device) {
    cudaPointerAttributes attr{};
    check(cudaPointerGetAttributes(&attr, device), "cudaPointerGetAttributes");
    auto it = lanes_.find(attr.device);
    if (it == lanes_.end()) it = lanes_.emplace(attr.device, lease(attr.device)).first;
    return *it->second;
}

void CudaLeafHasher::hash_leaves(const void *device, uint64_t count, uint64_t *out) {
    if (count > 0) lane_for(device).jobs.push_back({static_cast<const uint8_t *>(device), count, out});
}

void CudaLeafHasher::copy(void *dst, const void *device, uint64_t n) {
    if (n > 0) lane_for(device).copies.push_back({dst, device, n});
}

void CudaLeafHasher::wait() {
    for (auto &[device, lane] : lanes_) {
        OnDevice on(device);
        lane->wait();
    }
}

}  // namespace th
