// The parts of a shard a reader asked for with th_fetch_ranges: strided runs
// of bytes inside named tensors, each range landing at a destination of its
// own. Resolved against the shard's layout, a selection says which chunks the
// fetch has to read (only those some run touches) and, per chunk, which
// pieces of it land where, so that a column block of a row-major tensor moves
// in one fetch and only its own bytes cross the wire.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/layout.hpp"

namespace th {

// One th_range without its destination (the fetch holds that as a Buffer).
struct RangeRequest {
    std::string tensor;
    uint64_t offset = 0;      // of run 0, inside the tensor
    uint64_t row_bytes = 0;   // bytes per run
    uint64_t rows = 1;        // runs
    uint64_t src_stride = 0;  // between run starts in the tensor (rows > 1)
    uint64_t dst_stride = 0;  // between run starts in the destination; 0: row_bytes
};

// Bytes of destination the runs span: (rows - 1) * dst_stride + row_bytes.
// Only meaningful for a range check_range accepted.
uint64_t dst_span(const RangeRequest &r);

// What can be checked without the layout: non-zero lengths, strides no
// shorter than a run, sizes that fit in 64 bits, a destination of dst_bytes
// that holds the runs. Throws Error(TH_ERR_INVALID_ARG) naming range `index`
// and its tensor.
void check_range(const RangeRequest &r, uint64_t dst_bytes, size_t index);

// Bytes [offset, offset + length) of tensor `tensor` of the layout, landing
// at byte dst_offset of range `range`'s destination.
struct RangePiece {
    uint32_t range;
    uint32_t tensor;
    uint64_t offset;
    uint64_t length;
    uint64_t dst_offset;
};

class RangeSelection {
  public:
    RangeSelection() = default;
    // Resolves checked ranges against the layout. Throws Error naming the range
    // and tensor: TH_ERR_NOT_FOUND (no such tensor), TH_ERR_INVALID_ARG (runs
    // outside the tensor).
    RangeSelection(const Layout &layout, const std::vector<RangeRequest> &ranges);

    // The bytes asked for, summed over ranges.
    uint64_t bytes() const { return bytes_; }
    // The chunks holding at least one asked-for byte: ascending, distinct.
    const std::vector<uint32_t> &chunks() const { return chunks_; }
    // The pieces of chunk c, range by range and run by run; empty when no
    // range touches c.
    std::vector<RangePiece> pieces(uint32_t c) const;

  private:
    struct Resolved {
        uint32_t tensor = 0;
        uint64_t tensor_begin = 0;  // flat offset of the tensor's first byte
        uint64_t begin = 0;         // flat offset of run 0
        uint64_t end = 0;           // flat offset one past the last run
        uint64_t row_bytes = 0, rows = 1, stride = 0, dst_stride = 0;
    };
    uint64_t chunk_bytes_ = 0;
    uint64_t total_ = 0;
    uint64_t bytes_ = 0;
    std::vector<Resolved> ranges_;
    std::vector<uint32_t> chunks_;
    // For chunks_[i], the ranges touching it: touching_[first_[i] .. first_[i + 1]).
    std::vector<uint32_t> first_, touching_;
};

}  // namespace th
