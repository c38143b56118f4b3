#include "client/checksum.hpp"

#define XXH_STATIC_LINKING_ONLY  // XXH3_generateSecret_fromSeed
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <thread>

#include "client/host_xxh3.hpp"
#include "client/xxh3_leaf.hpp"
#include "common/error.hpp"
#include "common/thread_name.hpp"

#ifdef TH_WITH_CUDA
#include "client/checksum_cuda.hpp"
#else
namespace th {
// Without CUDA no device piece gets this far (check_memory_kind refuses it).
struct CudaLeafHasher {
    [[noreturn]] static void unsupported() {
        fail(TH_ERR_UNSUPPORTED, "CUDA memory, but this libtensorhub was built without CUDA");
    }
    void hash_leaves(const void *, uint64_t, uint64_t *) { unsupported(); }
    void copy(void *, const void *, uint64_t) { unsupported(); }
    void wait() {}
};
}  // namespace th
#endif

namespace th {

namespace xxh3 {

const LeafKeys &leaf_keys() {
    static const LeafKeys keys = [] {
        uint8_t secret[XXH3_SECRET_DEFAULT_SIZE];
        XXH3_generateSecret_fromSeed(secret, 0);
        auto at = [&](uint64_t off) { return lane::load64<false>(secret + off); };
        LeafKeys k{};
        for (unsigned l = 0; l < kLanes; ++l) {
            for (unsigned s = 0; s < kStripesPerBlock; ++s) k.stripe[s][l] = at(8 * s + 8 * l);
            k.scramble[l] = at(XXH3_SECRET_DEFAULT_SIZE - kStripe + 8 * l);
            k.last[l] = at(XXH3_SECRET_DEFAULT_SIZE - kStripe - 7 + 8 * l);
            k.merge[l] = at(11 + 8 * l);
        }
        return k;
    }();
    return keys;
}

}  // namespace xxh3

namespace {

using xxh3::kLeafBytes;

// Where the leaves of one chunk come from: those wholly inside one host
// piece are hashed in place, those wholly inside one CUDA piece on its GPU,
// and the rest (a short last leaf, a leaf across pieces) are gathered into
// host memory first. start() hashes or queues each leaf; once the hasher has
// been waited for, finish() gives the checksum.
class LeafWalk {
  public:
    LeafWalk(const std::vector<ChunkPiece> &pieces, CudaLeafHasher &cuda) : pieces_(pieces), cuda_(cuda) {
        uint64_t total = 0;
        for (const ChunkPiece &p : pieces) total += p.length;
        total_ = total;
        leaves_.assign((total + kLeafBytes - 1) / kLeafBytes, 0);
        whole_.assign(leaves_.size(), 0);
    }

    void start() {
        uint64_t at = 0;
        for (const ChunkPiece &p : pieces_) {
            hash_whole_leaves(p, at);
            at += p.length;
        }
        gather_the_rest();
    }
    uint64_t finish() {
        for (const auto &g : gathered_) leaves_[g.leaf] = host_xxh3(g.bytes.data(), g.bytes.size());
        return host_xxh3(leaves_.data(), leaves_.size() * sizeof(uint64_t));
    }
    // Leaves still to hash on a GPU.
    uint64_t device_leaves() const { return device_leaves_; }

  private:
    // The leaves wholly inside piece p, which starts `at` bytes into the chunk.
    void hash_whole_leaves(const ChunkPiece &p, uint64_t at) {
        uint64_t first = (at + kLeafBytes - 1) / kLeafBytes, end = (at + p.length) / kLeafBytes;
        if (end <= first) return;
        const uint8_t *base = static_cast<const uint8_t *>(p.data) + (first * kLeafBytes - at);
        std::fill(whole_.begin() + first, whole_.begin() + end, 1);
        if (p.kind == TH_MEM_HOST) {
            for (uint64_t l = first; l < end; ++l) leaves_[l] = host_xxh3(base + (l - first) * kLeafBytes, kLeafBytes);
            return;
        }
        cuda_.hash_leaves(base, end - first, leaves_.data() + first);
        device_leaves_ += end - first;
    }

    // Every leaf not hashed whole, copied piece by piece into host memory.
    void gather_the_rest() {
        for (uint64_t l = 0; l < leaves_.size(); ++l)
            if (!whole_[l]) gathered_.push_back({l, std::vector<uint8_t>(std::min(kLeafBytes, total_ - l * kLeafBytes))});
        if (gathered_.empty()) return;
        uint64_t at = 0;
        auto g = gathered_.begin();
        for (const ChunkPiece &p : pieces_) {
            uint64_t end = at + p.length;
            // The gathered leaves this piece overlaps, in order.
            while (g != gathered_.end() && (g->leaf + 1) * kLeafBytes <= at) ++g;
            for (auto h = g; h != gathered_.end() && h->leaf * kLeafBytes < end; ++h) {
                uint64_t lo = std::max(at, h->leaf * kLeafBytes), hi = std::min(end, h->leaf * kLeafBytes + h->bytes.size());
                uint8_t *dst = h->bytes.data() + (lo - h->leaf * kLeafBytes);
                const uint8_t *src = static_cast<const uint8_t *>(p.data) + (lo - at);
                if (p.kind == TH_MEM_HOST)
                    std::memcpy(dst, src, hi - lo);
                else
                    cuda_.copy(dst, src, hi - lo);
            }
            at = end;
        }
    }

    struct Gathered {
        uint64_t leaf;
        std::vector<uint8_t> bytes;
    };
    const std::vector<ChunkPiece> &pieces_;
    uint64_t total_ = 0;
    std::vector<uint64_t> leaves_;
    std::vector<uint8_t> whole_;  // per leaf: hashed in place (host) or on its GPU
    std::vector<Gathered> gathered_;
    CudaLeafHasher &cuda_;
    uint64_t device_leaves_ = 0;
};

// Device leaves queued before a batch of chunks waits: bounds the pinned
// memory the hashes land in (8 bytes a leaf: 1 MiB per 512 MiB of shard).
constexpr uint64_t kBatchLeaves = 128 * 1024;

}  // namespace

uint64_t checksum(const std::vector<ChunkPiece> &pieces) { return checksums({pieces})[0]; }

namespace {

// The checksums of chunks [lo, hi) into out[lo, hi), on the calling thread.
void checksum_range(const std::vector<std::vector<ChunkPiece>> &chunks, size_t lo, size_t hi, uint64_t *out) {
    CudaLeafHasher cuda;
    std::vector<LeafWalk> batch;
    batch.reserve(std::min<size_t>(hi - lo, 1024));
    uint64_t queued = 0;
    auto drain = [&] {
        cuda.wait();
        for (LeafWalk &w : batch) *out++ = w.finish();
        batch.clear();
        queued = 0;
    };
    for (size_t c = lo; c < hi; ++c) {
        batch.emplace_back(chunks[c], cuda).start();
        queued += batch.back().device_leaves();
        if (queued >= kBatchLeaves || batch.size() == batch.capacity()) drain();
    }
    drain();
}

// A shard's checksums are split among threads above this many bytes of host
// memory: one core hashes host memory at some 15 GB/s, and a publish waits
// for it.
constexpr uint64_t kParallelBytes = 64ull << 20;
constexpr unsigned kMaxThreads = 8;

}  // namespace

size_t checksum_threads(const std::vector<std::vector<ChunkPiece>> &chunks, unsigned cores) {
    uint64_t host_bytes = 0;
    for (const auto &pieces : chunks)
        for (const ChunkPiece &p : pieces)
            if (p.kind == TH_MEM_HOST) host_bytes += p.length;
    if (host_bytes < kParallelBytes) return 1;
    return std::min<size_t>({std::max(1u, cores), kMaxThreads, chunks.size()});
}

std::vector<uint64_t> checksums(const std::vector<std::vector<ChunkPiece>> &chunks) {
    std::vector<uint64_t> out(chunks.size());
    size_t threads = checksum_threads(chunks, std::thread::hardware_concurrency());
    if (threads < 2) {
        checksum_range(chunks, 0, chunks.size(), out.data());
        return out;
    }
    // Contiguous ranges, one per thread; this thread takes the first. The
    // first error is the one reported.
    std::vector<std::thread> helpers;
    std::vector<std::exception_ptr> errors(threads);
    auto range = [&](size_t t) {
        if (t > 0) name_this_thread("th-checksum");
        size_t lo = chunks.size() * t / threads, hi = chunks.size() * (t + 1) / threads;
        try {
            checksum_range(chunks, lo, hi, out.data() + lo);
        } catch (...) {
            errors[t] = std::current_exception();
        }
    };
    for (size_t t = 1; t < threads; ++t) helpers.emplace_back(range, t);
    range(0);
    for (auto &h : helpers) h.join();
    for (auto &e : errors)
        if (e) std::rethrow_exception(e);
    return out;
}

}  // namespace th
