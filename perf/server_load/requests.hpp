// The control requests a simulated worker sends, encoded exactly as the client
// library encodes them (src/client/: server_session.cpp, holdings.cpp,
// queries.cpp, fetch.cpp, progress_reporter.cpp), and the check that a reply
// is the non-error answer the request calls for.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "wire/replica_desc.hpp"
#include "wire/wire.hpp"

namespace th_load {

using th::wire::Bytes;

// What the simulated cluster looks like: one model, one version, shards of
// `tensors` tensors, workers packed 8 to a host and 128 to a rack (or, without
// topology, no labels at all: every holder is as near as any other).
struct Shape {
    bool topology = true;
    std::string model = "load";
    uint64_t version = 1;
    uint32_t tensors = 16;
    uint64_t tensor_bytes = 1 << 20;
    uint64_t chunk_bytes = 1 << 20;
};

enum class Kind { Hello, Publish, Plan, FetchDone, Resolve, Progress, Heartbeat };
const char *kind_name(Kind k);

class Requests {
  public:
    explicit Requests(Shape shape);

    // The replica worker w holds (one each).
    static uint64_t replica_of(uint64_t worker) { return 1'000'000 + worker; }

    Bytes hello(uint64_t worker, uint64_t request_id) const;
    // Worker w publishes shard 0 of the version (the publisher's copy).
    Bytes publish(uint64_t worker, uint64_t request_id) const;
    // Worker w asks where to read shard 0, serving its own replica on, as
    // fetch.cpp's first plan does (whole shard, latest version, its layout).
    Bytes plan(uint64_t worker, uint64_t request_id) const;
    // Worker w finished its copy, read from `source`.
    Bytes fetch_done(uint64_t worker, uint64_t request_id, uint64_t source) const;
    Bytes resolve(uint64_t worker, uint64_t request_id) const;
    Bytes progress(uint64_t worker, uint64_t request_id) const;
    Bytes heartbeat(uint64_t worker, uint64_t request_id) const;
    Bytes make(Kind kind, uint64_t worker, uint64_t request_id) const;

    // Empty when reply is the answer a request of this kind from this worker
    // expects; otherwise what is wrong with it.
    std::string check(Kind kind, uint64_t worker, uint64_t request_id, const uint8_t *reply, size_t size) const;

    // The source worker a (checked) PlanReply names.
    static uint64_t source_of(const uint8_t *reply, size_t size);

    uint32_t num_chunks() const;

  private:
    Shape shape_;
    std::vector<th::TensorSpec> specs_;
    th::ReplicaDesc desc_;
};

}  // namespace th_load
