// Buffers for the tests that publish and fetch through a Client.
#pragma once

#include <cstdint>
#include <vector>

#include "client/replica.hpp"

// The bytes of v as the one tensor of a shard.
inline std::vector<th::Buffer> one_tensor(std::vector<uint8_t> &v) {
    return {{{"w", TH_DTYPE_UINT8, {static_cast<int64_t>(v.size())}, v.size()}, v.data(), TH_MEM_HOST}};
}
