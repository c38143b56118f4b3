// Stripes: a shard's chunks cut into K contiguous runs, each planned as a tree
// of its own (docs/design.md, "Fan-out depth"). The server decides K per
// shard; readers and holders compute the same boundaries from it, so that a
// holder's per-stripe fill levels mean the same to every reader.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>

namespace th {

// A stripe count a control word can report (control_word.hpp).
constexpr uint32_t kMaxStripes = 11;
// Fewer chunks than this per stripe and a shard is cut into fewer stripes.
constexpr uint32_t kMinStripeChunks = 4;

// The stripes a shard of num_chunks is planned in when `wanted` are asked for
// (1: no striping).
inline uint32_t stripes_for(uint32_t num_chunks, uint32_t wanted) {
    uint32_t k = std::min({wanted, kMaxStripes, num_chunks / kMinStripeChunks});
    return std::max<uint32_t>(k, 1);
}

// Stripe i of k holds chunks [stripe_begin(n, k, i), stripe_begin(n, k, i + 1)).
inline uint32_t stripe_begin(uint32_t num_chunks, uint32_t k, uint32_t i) {
    return static_cast<uint32_t>(uint64_t(num_chunks) * i / k);
}

// The stripe holding chunk c.
inline uint32_t stripe_of(uint32_t num_chunks, uint32_t k, uint32_t c) {
    uint32_t i = static_cast<uint32_t>((uint64_t(c) * k + k - 1) / num_chunks);
    // Rounding may land one off at a boundary: settle it exactly.
    while (i > 0 && stripe_begin(num_chunks, k, i) > c) --i;
    while (i + 1 < k && stripe_begin(num_chunks, k, i + 1) <= c) ++i;
    return i;
}

// The stripes chunks [first, end) touch (first < end): [.first, .second).
inline std::pair<uint32_t, uint32_t> stripes_touching(uint32_t num_chunks, uint32_t k, uint32_t first, uint32_t end) {
    return {stripe_of(num_chunks, k, first), stripe_of(num_chunks, k, end - 1) + 1};
}

}  // namespace th
