// Known pseudo-random bytes for a (version, shard, tensor): what the demo,
// the tests and the benchmarks publish and then verify, byte for byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace th_support {

inline uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

inline uint64_t pattern_seed(uint64_t version, uint64_t shard, uint64_t tensor) {
    return splitmix64(version * 1000003ull + shard * 1009ull + tensor);
}

inline uint64_t pattern_word(uint64_t seed, uint64_t i) { return splitmix64(seed ^ (i * 0x9e3779b97f4a7c15ull)); }

inline void fill_pattern(void *dst, size_t n, uint64_t seed) {
    auto *p = static_cast<uint8_t *>(dst);
    size_t words = n / 8;
    for (size_t i = 0; i < words; ++i) {
        uint64_t w = pattern_word(seed, i);
        std::memcpy(p + i * 8, &w, 8);
    }
    if (n % 8) {
        uint64_t w = pattern_word(seed, words);
        std::memcpy(p + words * 8, &w, n % 8);
    }
}

// Index of the first byte that differs from the pattern, or n if none.
inline size_t check_pattern(const void *src, size_t n, uint64_t seed, size_t offset = 0) {
    const auto *p = static_cast<const uint8_t *>(src);
    // offset: where src starts inside the tensor (for partial reads).
    for (size_t i = 0; i < n; ++i) {
        size_t at = offset + i;
        uint64_t w = pattern_word(seed, at / 8);
        uint8_t want = static_cast<uint8_t>(w >> (8 * (at % 8)));
        if (at % 8 == 0 && i + 8 <= n) {
            uint64_t got;
            std::memcpy(&got, p + i, 8);
            if (got == w) {
                i += 7;
                continue;
            }
        }
        if (p[i] != want) return i;
    }
    return n;
}

}  // namespace th_support
