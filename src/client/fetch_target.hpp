// What a fetch fills: the destination buffers (a whole shard, one tensor's
// bytes, or th_fetch_ranges' ranges) set against the version's layout: which
// chunks the fetch needs, where each piece of a chunk lands, and whether it
// holds a chunk whole (only such a chunk can be checked against its checksum).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "client/checksum.hpp"
#include "client/fetch_source.hpp"
#include "client/range_selection.hpp"
#include "client/replica.hpp"
#include "common/deadline.hpp"
#include "common/layout.hpp"

namespace th {

struct FetchRequest {
    std::string model;
    uint64_t version = UINT64_MAX;
    uint32_t shard = 0;
    uint32_t timeout_ms = 0;
    std::optional<std::string> tensor;  // partial fetch of one tensor
    uint64_t offset = 0;
    uint64_t length = 0;
    // th_fetch_ranges: these ranges of the shard, the destination of ranges[i]
    // being dst[i]. Empty: the whole shard, or the single tensor above.
    std::vector<RangeRequest> ranges;
    // Called on the fetching thread with (bytes done, bytes needed), at most
    // every progress_interval_ms and once at the end; may be empty.
    std::function<void(uint64_t, uint64_t)> progress;
    uint32_t progress_interval_ms = TH_DEFAULT_PROGRESS_INTERVAL_MS;
    th_verify verify = TH_DEFAULT_VERIFY;  // which chunks are checked against the version's checksums
    CancelFlag cancel = nullptr;  // ends the fetch with TH_ERR_CANCELED
};

class FetchTarget {
  public:
    // Checks the buffers against the request (Error(TH_ERR_INVALID_ARG)).
    FetchTarget(const FetchRequest &req, std::vector<Buffer> dst);

    const std::vector<Buffer> &buffers() const { return dst_; }
    // The registration of each buffer, in order.
    void set_regions(std::vector<RegionRef> regions) { regions_ = std::move(regions); }
    // Not a whole shard: one tensor's range, or ranges.
    bool partial() const { return tensor_.has_value() || !ranges_.empty(); }

    // Takes the version's layout: checks the buffers against it (Error with
    // the reason) and decides which chunks are needed.
    void apply(Layout layout);
    const Layout &layout() const { return layout_; }
    // Needed chunks lie in [first_chunk, end_chunk); a ranged fetch skips
    // those between the ones its ranges touch.
    uint32_t first_chunk() const { return first_chunk_; }
    uint32_t end_chunk() const { return end_chunk_; }
    bool needed(uint32_t chunk) const;
    uint32_t needed_count() const { return needed_count_; }
    uint64_t bytes_wanted() const { return bytes_wanted_; }

    // Where the wanted bytes of chunk go.
    std::vector<Piece> pieces(uint32_t chunk) const;
    // The chunk's bytes where they landed, or nothing when only part of it
    // is wanted.
    std::optional<std::vector<ChunkPiece>> whole(uint32_t chunk) const;

  private:
    std::optional<std::string> tensor_;
    uint64_t offset_ = 0, length_ = 0;
    std::vector<RangeRequest> ranges_;
    std::vector<Buffer> dst_;
    std::vector<RegionRef> regions_;  // per buffer

    Layout layout_;
    uint64_t range_begin_ = 0, range_end_ = 0;  // flat bytes covered
    uint64_t bytes_wanted_ = 0;                 // of them, the ones asked for
    RangeSelection selection_;                  // ranges only
    uint32_t first_chunk_ = 0, end_chunk_ = 0, needed_count_ = 0;
};

}  // namespace th
