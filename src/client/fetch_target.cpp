#include "client/fetch_target.hpp"

#include <algorithm>

#include "common/error.hpp"

namespace th {

FetchTarget::FetchTarget(const FetchRequest &req, std::vector<Buffer> dst)
    : tensor_(req.tensor), offset_(req.offset), length_(req.length), ranges_(req.ranges), dst_(std::move(dst)) {
    if (dst_.empty()) fail(TH_ERR_INVALID_ARG, "no destination buffers given");
    if (tensor_ && dst_.size() != 1)
        fail(TH_ERR_INVALID_ARG, "a single-tensor fetch takes exactly one destination buffer");
    if (!ranges_.empty() && (tensor_ || dst_.size() != ranges_.size()))
        fail(TH_ERR_INTERNAL, "a ranged fetch needs one destination per range and no single tensor");
    for (const Buffer &b : dst_) {
        if (b.data == nullptr) fail(TH_ERR_INVALID_ARG, "destination '", b.spec.name, "' has a null data pointer");
        if (b.spec.nbytes == 0) fail(TH_ERR_INVALID_ARG, "destination '", b.spec.name, "' is empty");
    }
}

void FetchTarget::apply(Layout layout) {
    layout_ = std::move(layout);
    if (!ranges_.empty()) {
        selection_ = RangeSelection(layout_, ranges_);
        const std::vector<uint32_t> &chunks = selection_.chunks();
        first_chunk_ = chunks.front();
        end_chunk_ = chunks.back() + 1;
        needed_count_ = static_cast<uint32_t>(chunks.size());
        range_begin_ = layout_.chunk_begin(first_chunk_);
        range_end_ = layout_.chunk_end(end_chunk_ - 1);
        bytes_wanted_ = selection_.bytes();
        return;
    }
    if (tensor_) {
        int64_t t = layout_.find(*tensor_);
        if (t < 0) fail(TH_ERR_NOT_FOUND, "the shard has no tensor named '", *tensor_, "'");
        uint64_t size = layout_.tensors()[t].nbytes;
        uint64_t length = length_ == 0 ? size - std::min(size, offset_) : length_;
        if (offset_ >= size || length > size - offset_)
            fail(TH_ERR_INVALID_ARG, "bytes [", offset_, ", ", offset_ + length, ") are outside tensor '", *tensor_, "' of ",
                 size, " bytes");
        if (dst_[0].spec.nbytes < length)
            fail(TH_ERR_INVALID_ARG, "destination holds ", dst_[0].spec.nbytes, " bytes, ", length, " requested");
        range_begin_ = layout_.tensor_offset(t) + offset_;
        range_end_ = range_begin_ + length;
    } else {
        std::vector<TensorSpec> given;
        for (const Buffer &b : dst_) given.push_back(b.spec);
        std::string diff = describe_mismatch(layout_.tensors(), given);
        if (!diff.empty()) fail(TH_ERR_LAYOUT_MISMATCH, "buffers do not match the published layout: " + diff);
        range_begin_ = 0;
        range_end_ = layout_.total_bytes();
    }
    std::tie(first_chunk_, end_chunk_) = layout_.chunks_covering(range_begin_, range_end_);
    needed_count_ = end_chunk_ - first_chunk_;
    bytes_wanted_ = range_end_ - range_begin_;
}

bool FetchTarget::needed(uint32_t chunk) const {
    if (chunk < first_chunk_ || chunk >= end_chunk_) return false;
    return ranges_.empty() || std::binary_search(selection_.chunks().begin(), selection_.chunks().end(), chunk);
}

std::vector<Piece> FetchTarget::pieces(uint32_t chunk) const {
    std::vector<Piece> out;
    if (!ranges_.empty()) {
        for (const RangePiece &r : selection_.pieces(chunk))
            out.push_back(Piece{static_cast<uint8_t *>(dst_[r.range].data) + r.dst_offset, regions_[r.range].get(),
                                r.tensor, r.offset, r.length});
        return out;
    }
    uint64_t b = std::max(layout_.chunk_begin(chunk), range_begin_);
    uint64_t e = std::min(layout_.chunk_end(chunk), range_end_);
    for (const Segment &s : layout_.segments(b, e)) {
        Piece p{nullptr, nullptr, s.tensor, s.offset, s.length};
        if (tensor_) {
            uint64_t flat = layout_.tensor_offset(s.tensor) + s.offset;
            p.local = static_cast<uint8_t *>(dst_[0].data) + (flat - range_begin_);
            p.region = regions_[0].get();
        } else {
            p.local = static_cast<uint8_t *>(dst_[s.tensor].data) + s.offset;
            p.region = regions_[s.tensor].get();
        }
        out.push_back(p);
    }
    return out;
}

std::optional<std::vector<ChunkPiece>> FetchTarget::whole(uint32_t chunk) const {
    std::vector<ChunkPiece> got;
    uint64_t at = layout_.chunk_begin(chunk);
    for (const Piece &p : pieces(chunk)) {
        if (layout_.tensor_offset(p.tensor) + p.offset != at) return std::nullopt;
        at += p.length;
        got.push_back({p.local, p.length, p.region->kind});
    }
    if (at != layout_.chunk_end(chunk)) return std::nullopt;
    return got;
}

}  // namespace th
