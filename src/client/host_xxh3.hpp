// XXH3-64 (seed 0) of host memory, run with the widest vector unit this CPU
// offers. libxxhash as distributions build it uses SSE2 on x86-64 (about
// 13 GB/s a core here, from cache); the same hash with AVX2 runs about four
// times as fast from cache and twice as fast from memory, and a publish
// waits for its checksums while a sampling reader spends a core's share on
// them. The result is XXH3's, whichever unit computes it (a test holds both
// to libxxhash's).
#pragma once

#include <cstddef>
#include <cstdint>

namespace th {

uint64_t host_xxh3(const void *data, size_t length);

// The implementation host_xxh3 uses on this CPU ("avx2" or "baseline"), so
// that a test can hold the choice to what the CPU has.
const char *host_xxh3_unit();

namespace xxh3_units {
// Each implementation, for the test that holds them to libxxhash.
uint64_t baseline(const void *data, size_t length);
#if defined(__x86_64__)
uint64_t avx2(const void *data, size_t length);  // only where the CPU has AVX2
#endif
}  // namespace xxh3_units

}  // namespace th
