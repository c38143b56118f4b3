#include "client/host_xxh3.hpp"

// Inlined, so that this file's copy is compiled for the baseline ISA and
// host_xxh3_avx2.cpp's for AVX2 (both are kept out of unity batches).
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace th {

namespace xxh3_units {
uint64_t baseline(const void *data, size_t length) { return XXH3_64bits(data, length); }
}  // namespace xxh3_units

namespace {

using Unit = uint64_t (*)(const void *, size_t);

struct Chosen {
    Unit fn;
    const char *name;
};

Chosen choose() {
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2")) return {xxh3_units::avx2, "avx2"};
#endif
    return {xxh3_units::baseline, "baseline"};
}

const Chosen &chosen() {
    static const Chosen c = choose();
    return c;
}

}  // namespace

uint64_t host_xxh3(const void *data, size_t length) { return chosen().fn(data, length); }

const char *host_xxh3_unit() { return chosen().name; }

}  // namespace th
