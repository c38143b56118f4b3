// Per-chunk checksums: XXH3-64 of each chunk's bytes, computed once by the
// publisher and carried by the version's shard, so that a reader can check
// what it read against the version, whichever replica it came from.
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

// XXH3-64 of the pieces laid end to end (a chunk may span tensors). CUDA
// memory is staged through host memory.
uint64_t checksum(const std::vector<ChunkPiece> &pieces);

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
