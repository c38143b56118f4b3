// One shard's tensors in host memory, as the demo, the tests and the
// benchmarks publish and fetch them: n 1-D tensors "<prefix><i><suffix>" of
// the same dtype and size, with the th_tensor views the C API takes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pattern.hpp"
#include "tensorhub/tensorhub.h"

namespace th_support {

// A 1-D view of nbytes of host memory (nbytes a multiple of the dtype size).
inline th_tensor host_tensor(const char *name, th_dtype dtype, void *data, uint64_t nbytes) {
    th_tensor v{};
    v.name = name;
    v.dtype = dtype;
    v.ndim = 1;
    v.shape[0] = static_cast<int64_t>(nbytes / th_dtype_size(dtype));
    v.data = data;
    v.nbytes = nbytes;
    v.mem_kind = TH_MEM_HOST;
    return v;
}

struct HostShard {
    std::vector<std::vector<uint8_t>> data;
    std::vector<std::string> names;
    std::vector<th_tensor> views;

    // n tensors of bytes_each (rounded down to whole elements).
    HostShard(int n, uint64_t bytes_each, th_dtype dtype, const std::string &prefix = "w",
              const std::string &suffix = "") {
        bytes_each -= bytes_each % th_dtype_size(dtype);
        for (int i = 0; i < n; ++i) {
            data.emplace_back(bytes_each);
            names.push_back(prefix + std::to_string(i) + suffix);
        }
        for (int i = 0; i < n; ++i) views.push_back(host_tensor(names[i].c_str(), dtype, data[i].data(), bytes_each));
    }
    HostShard(const HostShard &) = delete;  // views point into data and names
    HostShard &operator=(const HostShard &) = delete;
    HostShard(HostShard &&other) noexcept : data(std::move(other.data)), names(std::move(other.names)) {
        // Short names live inside their std::string: take the pointers anew.
        for (size_t i = 0; i < data.size(); ++i)
            views.push_back(host_tensor(names[i].c_str(), other.views[i].dtype, data[i].data(), data[i].size()));
    }

    uint64_t bytes() const { return data.size() * data[0].size(); }
    // Tensor i of (version, shard) holds pattern_seed(version, shard, i).
    void fill(uint64_t version, uint32_t shard) {
        for (size_t i = 0; i < data.size(); ++i) fill_pattern(data[i].data(), data[i].size(), pattern_seed(version, shard, i));
    }
    // The first tensor that differs from (version, shard), or -1.
    int first_wrong(uint64_t version, uint32_t shard, size_t *byte = nullptr) const {
        for (size_t i = 0; i < data.size(); ++i) {
            size_t bad = check_pattern(data[i].data(), data[i].size(), pattern_seed(version, shard, i));
            if (bad != data[i].size()) {
                if (byte) *byte = bad;
                return static_cast<int>(i);
            }
        }
        return -1;
    }
};

}  // namespace th_support
