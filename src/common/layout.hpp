// The layout of a shard: its ordered, named tensors laid end to end in one flat
// byte space, cut into fixed-size chunks. Chunks are the unit of replication
// progress, checksums and re-planning, and of reads (one read covers a chunk,
// or several on a lane where a chunk takes microseconds); a chunk may span
// several tensors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensorhub/tensorhub.h"

namespace th {

struct TensorSpec {
    std::string name;
    th_dtype dtype = TH_DTYPE_UINT8;
    std::vector<int64_t> shape;
    uint64_t nbytes = 0;

    bool operator==(const TensorSpec &) const = default;
};

// A contiguous piece of one tensor: bytes [offset, offset + length) of tensors[tensor].
struct Segment {
    uint32_t tensor;
    uint64_t offset;
    uint64_t length;
};

constexpr uint64_t kMinChunkBytes = 4096;
constexpr uint64_t kMaxChunkBytes = 1ull << 30;
constexpr size_t kMaxTensors = 1 << 20;
constexpr size_t kMaxNameBytes = 1024;

class Layout {
  public:
    Layout() = default;
    // Validates the specs (names unique and non-empty, nbytes consistent with
    // dtype and shape) and chunk_bytes; throws Error(TH_ERR_INVALID_ARG).
    Layout(std::vector<TensorSpec> tensors, uint64_t chunk_bytes);

    const std::vector<TensorSpec> &tensors() const { return tensors_; }
    uint64_t chunk_bytes() const { return chunk_bytes_; }
    uint64_t total_bytes() const { return total_; }
    uint32_t num_chunks() const { return num_chunks_; }
    // Flat offset of the first byte of tensor i.
    uint64_t tensor_offset(size_t i) const { return offsets_[i]; }
    // Index of the tensor called name, or -1.
    int64_t find(const std::string &name) const;

    // Flat byte range of chunk c: [begin, end).
    uint64_t chunk_begin(uint32_t c) const { return uint64_t(c) * chunk_bytes_; }
    uint64_t chunk_end(uint32_t c) const;
    // The tensor pieces that make up flat bytes [begin, end), in order.
    std::vector<Segment> segments(uint64_t begin, uint64_t end) const;
    // Chunks overlapping flat bytes [begin, end): [first, last).
    std::pair<uint32_t, uint32_t> chunks_covering(uint64_t begin, uint64_t end) const;

  private:
    std::vector<TensorSpec> tensors_;
    std::vector<uint64_t> offsets_;
    uint64_t chunk_bytes_ = TH_DEFAULT_CHUNK_BYTES;
    uint64_t total_ = 0;
    uint32_t num_chunks_ = 0;
};

// Element count * dtype size, or throws on an unknown dtype / negative dim / overflow.
uint64_t expected_nbytes(th_dtype dtype, const std::vector<int64_t> &shape);

// Describes the first difference between the published layout and the one a
// reader brought ("tensor 3 'w.fc1': 4096 bytes published, 2048 given"), or
// the empty string when they match.
std::string describe_mismatch(const std::vector<TensorSpec> &published,
                              const std::vector<TensorSpec> &given);

const char *dtype_name(th_dtype dtype);

// Whether a raw number (from the wire or a C caller) names a th_dtype. Raw
// values are checked before they become a th_dtype: an enum holding a value
// it does not define is undefined behaviour in C++.
inline bool dtype_known(uint32_t raw) { return raw <= TH_DTYPE_UINT64; }

}  // namespace th
