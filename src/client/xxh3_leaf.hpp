// XXH3-64 (seed 0) of exactly kLeafBytes bytes, cut into the steps of its
// eight accumulator lanes, so that a GPU computes one leaf with eight threads
// (checksum_cuda.cu: a lane per thread, the lanes exchanging input words by
// warp shuffles) and the host runs the very same steps lane by lane, which a
// test holds to libxxhash's XXH3_64bits. The algorithm is xxHash's
// (https://github.com/Cyan4973/xxHash, doc/xxhash_spec.md, "long" inputs):
// stripes of 64 bytes feed eight 64-bit accumulators, which are scrambled
// after each 1 KiB block and merged at the end. The secret is XXH3's default
// one, taken from libxxhash at run time (leaf_keys), so no copy of xxHash's
// constants lives here.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define TH_HOST_DEVICE __host__ __device__
#else
#define TH_HOST_DEVICE
#endif

namespace th::xxh3 {

constexpr uint64_t kLeafBytes = 4096;
constexpr unsigned kLanes = 8;
constexpr uint64_t kStripe = 64;
constexpr unsigned kStripesPerBlock = 16;                  // (192-byte secret - 64) / 8
constexpr uint64_t kBlock = kStripe * kStripesPerBlock;     // 1 KiB
constexpr unsigned kFullBlocks = (kLeafBytes - 1) / kBlock;  // 3
constexpr unsigned kTailStripes = ((kLeafBytes - 1) - kFullBlocks * kBlock) / kStripe;  // 15

// The secret's words as each lane uses them (little-endian loads of the
// default secret at the offsets XXH3 reads).
struct LeafKeys {
    uint64_t stripe[kStripesPerBlock][kLanes];  // stripe s of a block, lane l: secret + 8s + 8l
    uint64_t scramble[kLanes];                  // secret + 128 + 8l
    uint64_t last[kLanes];                      // the leaf's last stripe: secret + 121 + 8l
    uint64_t merge[kLanes];                     // secret + 11 + 8l
};

// From libxxhash's default secret; computed once (checksum.cpp).
const LeafKeys &leaf_keys();

namespace lane {

constexpr uint32_t kPrime32_1 = 0x9E3779B1U, kPrime32_2 = 0x85EBCA77U, kPrime32_3 = 0xC2B2AE3DU;
constexpr uint64_t kPrime64_1 = 0x9E3779B185EBCA87ULL, kPrime64_2 = 0xC2B2AE3D27D4EB4FULL,
                   kPrime64_3 = 0x165667B19E3779F9ULL, kPrime64_4 = 0x85EBCA77C2B2AE63ULL,
                   kPrime64_5 = 0x27D4EB2F165667C5ULL, kPrimeMx1 = 0x165667919E3779F9ULL;

TH_HOST_DEVICE inline uint64_t init(unsigned l) {
    switch (l) {
        case 0: return kPrime32_3;
        case 1: return kPrime64_1;
        case 2: return kPrime64_2;
        case 3: return kPrime64_3;
        case 4: return kPrime64_4;
        case 5: return kPrime32_2;
        case 6: return kPrime64_5;
        default: return kPrime32_1;
    }
}

// Lane l's share of one stripe: its own input word v (bytes 8l..8l+7) with
// its key, plus its partner lane's word (l ^ 1).
TH_HOST_DEVICE inline uint64_t stripe(uint64_t acc, uint64_t v, uint64_t partner_v, uint64_t key) {
    uint64_t k = v ^ key;
    return acc + partner_v + static_cast<uint64_t>(static_cast<uint32_t>(k)) * (k >> 32);
}

TH_HOST_DEVICE inline uint64_t scramble(uint64_t acc, uint64_t key) {
    acc ^= acc >> 47;
    acc ^= key;
    return acc * kPrime32_1;
}

TH_HOST_DEVICE inline uint64_t mul128_fold64(uint64_t a, uint64_t b) {
#ifdef __CUDA_ARCH__
    return a * b ^ __umul64hi(a, b);
#else
    unsigned __int128 p = static_cast<unsigned __int128>(a) * b;
    return static_cast<uint64_t>(p) ^ static_cast<uint64_t>(p >> 64);
#endif
}

// Lane pair (2i, 2i + 1)'s share of the merge, computed by the even lane.
TH_HOST_DEVICE inline uint64_t fold_pair(uint64_t even, uint64_t odd, uint64_t even_key, uint64_t odd_key) {
    return mul128_fold64(even ^ even_key, odd ^ odd_key);
}

// The hash from the sum of the four pairs' shares.
TH_HOST_DEVICE inline uint64_t finish(uint64_t folded) {
    uint64_t h = kLeafBytes * kPrime64_1 + folded;
    h ^= h >> 37;
    h *= kPrimeMx1;
    return h ^ (h >> 32);
}

// Little-endian 64-bit load; Aligned: p is 8-byte aligned.
template <bool Aligned>
TH_HOST_DEVICE inline uint64_t load64(const uint8_t *p) {
    if constexpr (Aligned) {
        return *reinterpret_cast<const uint64_t *>(p);
    } else {
        uint64_t v = 0;
        for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
        return v;
    }
}

// Where lane l's word of stripe s of the leaf is: the leaf's full blocks,
// then its tail stripes, then its last stripe (the 64 bytes ending at its
// end, overlapping the tail).
TH_HOST_DEVICE inline uint64_t stripe_offset(unsigned block, unsigned s) { return block * kBlock + s * kStripe; }
constexpr uint64_t kLastStripe = kLeafBytes - kStripe;

}  // namespace lane

// The host's run of the lanes' steps, lane by lane: what the GPU computes,
// and what a test holds to XXH3_64bits.
inline uint64_t leaf_hash(const uint8_t *p, const LeafKeys &keys) {
    using namespace lane;
    uint64_t acc[kLanes], v[kLanes];
    for (unsigned l = 0; l < kLanes; ++l) acc[l] = init(l);
    auto feed = [&](uint64_t at, const uint64_t *key) {
        for (unsigned l = 0; l < kLanes; ++l) v[l] = load64<false>(p + at + 8 * l);
        for (unsigned l = 0; l < kLanes; ++l) acc[l] = stripe(acc[l], v[l], v[l ^ 1], key[l]);
    };
    for (unsigned b = 0; b < kFullBlocks; ++b) {
        for (unsigned s = 0; s < kStripesPerBlock; ++s) feed(stripe_offset(b, s), keys.stripe[s]);
        for (unsigned l = 0; l < kLanes; ++l) acc[l] = scramble(acc[l], keys.scramble[l]);
    }
    for (unsigned s = 0; s < kTailStripes; ++s) feed(stripe_offset(kFullBlocks, s), keys.stripe[s]);
    feed(kLastStripe, keys.last);
    uint64_t folded = 0;
    for (unsigned l = 0; l < kLanes; l += 2) folded += fold_pair(acc[l], acc[l + 1], keys.merge[l], keys.merge[l + 1]);
    return finish(folded);
}

}  // namespace th::xxh3
