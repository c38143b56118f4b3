// host_xxh3's AVX2 implementation: this file alone is compiled with -mavx2
// (src/client/CMakeLists.txt) and called only where the CPU has AVX2.
#include "client/host_xxh3.hpp"

#define XXH_INLINE_ALL
#include <xxhash.h>

#if !defined(__AVX2__)
#error "host_xxh3_avx2.cpp must be compiled with -mavx2"
#endif

namespace th::xxh3_units {
uint64_t avx2(const void *data, size_t length) { return XXH3_64bits(data, length); }
}  // namespace th::xxh3_units
