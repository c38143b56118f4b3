// Per-chunk checksums, computed once by the publisher and carried by the
// version's shard, so that a reader can check what it read against the
// version, whichever replica it came from.
//
// A chunk's checksum is XXH3-64 of the XXH3-64s of its 4 KiB leaves (the last
// one may be shorter), each as 8 little-endian bytes: a tree, so that CUDA
// memory is hashed on its GPU, a leaf per thread (checksum_cuda.hpp), and
// only the leaves' hashes cross to the host. The wire protocol's version
// names this definition (a peer that hashes otherwise is refused at its
// first message).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "tensorhub/tensorhub.h"

namespace th {

// A contiguous piece of a chunk in this process's memory.
struct ChunkPiece {
    const void *data;
    uint64_t length;
    th_mem_kind kind;
};

// The checksum of the pieces laid end to end (a chunk may span tensors, of
// either kind of memory).
uint64_t checksum(const std::vector<ChunkPiece> &pieces);
// The checksums of many chunks: their device work is queued together and
// waited for once per batch, rather than once per chunk.
std::vector<uint64_t> checksums(const std::vector<std::vector<ChunkPiece>> &chunks);
// Threads checksums() hashes these chunks on, given the machine's cores: one
// below 64 MiB of host memory. Device memory does not count: its leaves are
// hashed by one kernel launch a batch, and every thread more would add a
// launch and a wait (on an H200 the verifier's runs, ~100 MB of sampled
// chunks each and so split eight ways, took ~410 us each).
size_t checksum_threads(const std::vector<std::vector<ChunkPiece>> &chunks, unsigned cores);

// Which confirmed chunks a reader checks.
class VerifyPolicy {
  public:
    // One chunk in kSampleEvery, drawn per reader, under TH_VERIFY_SAMPLE.
    static constexpr uint32_t kSampleEvery = 8;
    explicit VerifyPolicy(th_verify mode) : mode_(mode), rng_(std::random_device{}()) {}
    bool check(uint32_t /*chunk*/) {
        if (mode_ == TH_VERIFY_ALL) return true;
        if (mode_ == TH_VERIFY_OFF) return false;
        return rng_() % kSampleEvery == 0;
    }

  private:
    th_verify mode_;
    std::minstd_rand rng_;
};

}  // namespace th
