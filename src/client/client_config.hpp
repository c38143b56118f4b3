// What a client is created with: th_client_config in C++ terms, shared by the
// parts of the client (the server session, the replicas it holds, fetches).
#pragma once

#include <cstdint>
#include <string>

#include "common/labels.hpp"
#include "tensorhub/tensorhub.h"

namespace th {

struct ClientConfig {
    std::string server_url;  // one URL, or an ordered comma-separated list to fail over along
    std::string worker_name;
    Labels labels;
    uint32_t timeout_ms = TH_DEFAULT_TIMEOUT_MS;
    uint32_t heartbeat_ms = TH_DEFAULT_HEARTBEAT_MS;
    uint32_t chunk_timeout_ms = TH_DEFAULT_CHUNK_TIMEOUT_MS;
    uint32_t max_inflight = TH_DEFAULT_MAX_INFLIGHT;
    th_retention retention = TH_DEFAULT_RETENTION;
    uint32_t mutation_wait_ms = TH_DEFAULT_MUTATION_WAIT_MS;
    std::string token;  // cluster token (empty: none)
    uint64_t spill_pool_bytes = TH_DEFAULT_SPILL_POOL_BYTES;  // 0: no limit
    bool spill_ahead = TH_DEFAULT_SPILL_AHEAD != 0;  // copy at publish what a spill would
    uint32_t copy_threads = TH_DEFAULT_COPY_THREADS;  // threads posting one-sided reads
    // The most bytes one heartbeat hashes when the server asks this worker to
    // check chunks readers reported (at least one chunk); the server asks
    // again for the rest. Not in th_client_config: a bound, not a choice.
    uint64_t check_bytes_per_beat = 256ull << 20;
};

}  // namespace th
