#include "client/range_selection.hpp"

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "common/error.hpp"

namespace th {

namespace {

// a * b + c, or false when it does not fit in 64 bits.
bool mul_add(uint64_t a, uint64_t b, uint64_t c, uint64_t &out) {
    uint64_t m = 0;
    return !__builtin_mul_overflow(a, b, &m) && !__builtin_add_overflow(m, c, &out);
}

uint64_t stride_of(const RangeRequest &r) { return r.rows > 1 ? r.src_stride : r.row_bytes; }
uint64_t dst_stride_of(const RangeRequest &r) { return r.dst_stride != 0 ? r.dst_stride : r.row_bytes; }

// Bytes of the tensor the runs span from run 0's first byte.
uint64_t src_span(const RangeRequest &r) { return (r.rows - 1) * stride_of(r) + r.row_bytes; }

}  // namespace

uint64_t dst_span(const RangeRequest &r) { return (r.rows - 1) * dst_stride_of(r) + r.row_bytes; }

void check_range(const RangeRequest &r, uint64_t dst_bytes, size_t index) {
    auto bad = [&](auto &&...why) { fail(TH_ERR_INVALID_ARG, "range ", index, " of tensor '", r.tensor, "': ", why...); };
    if (r.tensor.empty()) fail(TH_ERR_INVALID_ARG, "range ", index, " has no tensor name");
    if (r.row_bytes == 0) bad("row_bytes is 0");
    if (r.rows == 0) bad("rows is 0");
    if (r.rows > 1 && r.src_stride < r.row_bytes)
        bad("src_stride ", r.src_stride, " is shorter than a run of ", r.row_bytes, " bytes");
    if (r.rows > 1 && r.dst_stride != 0 && r.dst_stride < r.row_bytes)
        bad("dst_stride ", r.dst_stride, " is shorter than a run of ", r.row_bytes, " bytes (runs would overlap)");
    uint64_t src_end = 0, dst_end = 0;
    if (!mul_add(r.rows - 1, stride_of(r), r.row_bytes, src_end) || src_end + r.offset < src_end ||
        !mul_add(r.rows - 1, dst_stride_of(r), r.row_bytes, dst_end))
        bad("its runs span more than 2^64 bytes");
    if (dst_bytes < dst_end)
        bad("the destination holds ", dst_bytes, " bytes, but ", r.rows, r.rows == 1 ? " run" : " runs", " of ",
            r.row_bytes, " bytes", r.rows > 1 ? str(" every ", dst_stride_of(r), " bytes") : std::string(), " span ",
            dst_end);
}

RangeSelection::RangeSelection(const Layout &layout, const std::vector<RangeRequest> &ranges)
    : chunk_bytes_(layout.chunk_bytes()), total_(layout.total_bytes()) {
    std::unordered_map<std::string, uint32_t> by_name;
    for (size_t t = 0; t < layout.tensors().size(); ++t) by_name.emplace(layout.tensors()[t].name, static_cast<uint32_t>(t));
    std::vector<std::pair<uint32_t, uint32_t>> touched;  // (chunk, range)
    for (size_t i = 0; i < ranges.size(); ++i) {
        const RangeRequest &r = ranges[i];
        auto it = by_name.find(r.tensor);
        if (it == by_name.end()) fail(TH_ERR_NOT_FOUND, "range ", i, ": the shard has no tensor named '", r.tensor, "'");
        uint64_t size = layout.tensors()[it->second].nbytes;
        uint64_t span = src_span(r);
        if (r.offset >= size || span > size - r.offset) {
            if (r.rows == 1)
                fail(TH_ERR_INVALID_ARG, "range ", i, ": bytes [", r.offset, ", ", r.offset + span,
                     ") are outside tensor '", r.tensor, "' of ", size, " bytes");
            fail(TH_ERR_INVALID_ARG, "range ", i, ": ", r.rows, " runs of ", r.row_bytes, " bytes every ", r.src_stride,
                 " bytes from byte ", r.offset, " end at byte ", r.offset + span, ", outside tensor '", r.tensor, "' of ",
                 size, " bytes");
        }
        Resolved v;
        v.tensor = it->second;
        v.tensor_begin = layout.tensor_offset(it->second);
        v.begin = v.tensor_begin + r.offset;
        v.end = v.begin + span;
        v.row_bytes = r.row_bytes;
        v.rows = r.rows;
        v.stride = stride_of(r);
        v.dst_stride = dst_stride_of(r);
        // Runs back to back on both sides are one run: one read per chunk.
        if (v.rows > 1 && v.stride == v.row_bytes && v.dst_stride == v.row_bytes) {
            v.row_bytes *= v.rows;
            v.rows = 1;
            v.stride = v.dst_stride = v.row_bytes;
        }
        bytes_ += r.row_bytes * r.rows;
        // Runs ascend, so the chunks they touch do too.
        uint32_t last = UINT32_MAX;
        for (uint64_t row = 0; row < v.rows; ++row) {
            uint64_t lo = v.begin + row * v.stride, hi = lo + v.row_bytes;
            auto c = static_cast<uint32_t>(lo / chunk_bytes_);
            auto c_end = static_cast<uint32_t>((hi - 1) / chunk_bytes_);
            if (c == last) ++c;  // already recorded by the run before
            for (; c <= c_end; ++c) touched.emplace_back(c, static_cast<uint32_t>(i));
            last = c_end;
        }
        ranges_.push_back(v);
    }
    std::sort(touched.begin(), touched.end());
    for (size_t k = 0; k < touched.size(); ++k) {
        if (k == 0 || touched[k].first != touched[k - 1].first) {
            chunks_.push_back(touched[k].first);
            first_.push_back(static_cast<uint32_t>(touching_.size()));
        }
        touching_.push_back(touched[k].second);
    }
    first_.push_back(static_cast<uint32_t>(touching_.size()));
}

std::vector<RangePiece> RangeSelection::pieces(uint32_t c) const {
    std::vector<RangePiece> out;
    auto at = std::lower_bound(chunks_.begin(), chunks_.end(), c);
    if (at == chunks_.end() || *at != c) return out;
    size_t k = static_cast<size_t>(at - chunks_.begin());
    uint64_t cb = uint64_t(c) * chunk_bytes_, ce = std::min(total_, cb + chunk_bytes_);
    for (uint32_t j = first_[k]; j < first_[k + 1]; ++j) {
        const Resolved &v = ranges_[touching_[j]];
        // The first run ending after the chunk's start.
        uint64_t row = 0;
        if (cb > v.begin) {
            uint64_t rel = cb - v.begin;
            row = rel / v.stride;
            if (rel - row * v.stride >= v.row_bytes) ++row;
        }
        for (; row < v.rows; ++row) {
            uint64_t lo = v.begin + row * v.stride;
            if (lo >= ce) break;
            uint64_t b = std::max(lo, cb), e = std::min(lo + v.row_bytes, ce);
            if (b < e)
                out.push_back({touching_[j], v.tensor, b - v.tensor_begin, e - b, row * v.dst_stride + (b - lo)});
        }
    }
    return out;
}

}  // namespace th
