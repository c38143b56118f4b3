// Leaf hashes (xxh3_leaf.hpp) of CUDA memory, computed on the GPU that holds
// it: the device work of a batch of chunks, collected and then run at wait()
// as one kernel launch and one copy back per device. Its streams, device
// scratch and pinned host memory come from a process-wide pool and go back to
// it, so a checksum allocates nothing once the pool is warm.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

namespace th {

class CudaLeafHasher {
  public:
    CudaLeafHasher() = default;
    ~CudaLeafHasher();
    CudaLeafHasher(const CudaLeafHasher &) = delete;
    CudaLeafHasher &operator=(const CudaLeafHasher &) = delete;

    // Hashes `count` whole leaves laid end to end at `device` into out[0,
    // count) (host memory), by the time wait() returns. `out` must stay put
    // until then.
    void hash_leaves(const void *device, uint64_t count, uint64_t *out);
    // Copies n bytes of device memory to host memory at dst, by wait().
    void copy(void *dst, const void *device, uint64_t n);
    // Waits for everything queued; throws Error(TH_ERR_TRANSPORT) saying
    // what CUDA reported if any of it failed.
    void wait();

    struct Lane;  // one device's stream, scratch and pinned memory

  private:
    Lane &lane_for(const void *device);
    std::map<int, Lane *> lanes_;  // by device ordinal, leased from the pool
};

}  // namespace th
