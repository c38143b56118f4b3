// The real metadata service, driven by the simulator: each call builds the
// FlatBuffers request a client would send, passes it to Service::handle()
// and decodes the reply. Only the wire and the clock are simulated; the time
// spent inside handle() is measured with the real clock.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "server/service.hpp"

namespace th::sim {

struct PlannedSource {
    uint64_t worker = 0;
    uint64_t replica = 0;
    bool complete = false;
    uint32_t first_chunk = 0, num_chunks = 0;
};

// A plan: a source per range (several when striped), and the stripe count the
// reader reports fill levels for (1: not striped).
struct Plan {
    std::vector<PlannedSource> ranges;
    uint32_t stripes = 1;
};

struct MutationState {
    uint32_t active_reads = 0;
    bool last_copy = false;
    uint32_t filling = 0;
};

struct ControlStats {
    std::map<std::string, uint64_t> messages;  // by request type
    uint64_t plans = 0;
    double plan_seconds = 0, plan_max_seconds = 0;  // inside handle(), real clock
    double handle_seconds = 0;                     // every request
    uint64_t total_messages() const;
};

class Control {
  public:
    // now_ms: the simulated clock the service reads.
    Control(std::function<uint64_t()> now_ms, uint32_t max_readers_per_source, uint32_t stripes);

    void hello(uint64_t worker, const Labels &labels);
    void publish(uint64_t worker, uint64_t version, uint64_t replica, uint64_t total_bytes, uint64_t chunk_bytes,
                 bool owned = false);
    // Sources for the chunks [first, first + count) of the shard; the reader's
    // replica (replica != 0) becomes a filling source. Returns false (and
    // says why in *error) when the server has no eligible source.
    bool plan(uint64_t worker, uint64_t version, uint64_t replica, uint32_t first, uint32_t count,
              const std::vector<uint64_t> &exclude, const std::vector<uint64_t> &exclude_replicas, wire::PlanMode mode,
              Plan *out, std::string *error);
    void fetch_done(uint64_t worker, uint64_t version, uint64_t replica, const std::map<std::pair<uint64_t, uint64_t>, uint64_t> &bytes_from,
                    uint64_t duration_us);
    void source_failed(uint64_t worker, uint64_t failed_worker);
    MutationState begin_mutation(uint64_t worker, uint64_t replica);
    void release(uint64_t worker, uint64_t replica);
    void goodbye(uint64_t worker);
    void heartbeat(uint64_t worker);

    // Re-registers nobody: workers whose lease ran out on the simulated clock are dropped.
    size_t expire(uint64_t now_ms) { return service_.expire(now_ms); }

    const ControlStats &stats() const { return stats_; }
    void reset_stats() { stats_ = {}; }

    static constexpr const char *kModel = "policy";

  private:
    wire::Bytes call(const char *type, uint64_t worker, const std::function<wire::Bytes(wire::Builder &, const wire::Header &)> &build);
    wire::Header header(uint64_t worker, bool hello = false);

    Service service_;
    std::map<uint64_t, uint64_t> next_request_;
    std::map<uint64_t, uint64_t> total_bytes_;  // per version, for the layout
    ControlStats stats_;
};

}  // namespace th::sim
