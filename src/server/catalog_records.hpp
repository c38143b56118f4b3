// The records the catalog keeps (catalog.hpp): workers, and for each model
// its versions, their shards and the replicas that hold them. No weight
// bytes, only where they are. Plain data: the Catalog keeps them consistent.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/labels.hpp"
#include "common/layout.hpp"
#include "common/stripes.hpp"
#include "server/policy.hpp"
#include "wire/replica_desc.hpp"

namespace th {

struct ReplicaInfo;

// Replicas of a shard in the policy's load order (policy.hpp), by replica id.
using LoadIndex = std::set<std::pair<LoadRank, uint64_t>>;
struct ShardInfo;

// The depth of a relay whose own stripe has no source yet: ranks last.
constexpr uint32_t kNoDepth = UINT32_MAX;
// The depth of a relay that follows another reader for its own stripe, and
// of its descendants beyond it: rank after relays fed from a complete holder.
constexpr uint32_t kFollowing = 1u << 20;

// Where a replica lives.
struct ReplicaKey {
    std::string model;
    uint64_t version = 0;
    uint32_t shard = 0;
};

struct WorkerInfo {
    uint64_t id = 0;
    std::string name;
    Labels labels;
    Neighbourhood place;  // from labels
    std::vector<uint8_t> ucx_address;
    uint64_t last_seen_ms = 0;
    uint64_t bytes_served = 0;
    uint32_t active_reads = 0;
    bool suspect = false;  // not routed to until it re-registers (server/reachability.hpp)
    // Readers that could not read from it, by reader id: when (server
    // clock, ms). It stays in service while it talks to the server and only
    // one of them failed.
    std::map<uint64_t, uint64_t> reported_by;
    // When a fetch that read from it last ended without its reader having
    // reported it (server clock, ms; 0: never).
    uint64_t served_ms = 0;
    // Workers this one could not read from: not planned for it until
    // until_ms, unless they register with another UCX address (its hash).
    struct Avoid {
        uint64_t until_ms = 0;
        uint64_t reported_ms = 0;  // the last report
        uint32_t strikes = 0;
        size_t address = 0;
    };
    std::unordered_map<uint64_t, Avoid> avoid;
    std::vector<ReplicaInfo *> held;  // its replicas: their ranks move with its load
    // Chunks reported of its replicas before it registered again, by replica
    // id: they stay reported when it declares them again.
    std::map<uint64_t, std::vector<uint32_t>> unchecked;
};

struct ReplicaInfo {
    uint64_t id = 0;
    uint64_t worker = 0;
    // workers[worker]: a worker's replicas go before it does, so this stays
    // valid; saves a lookup per holder on every plan.
    WorkerInfo *holder = nullptr;
    ShardInfo *shard = nullptr;  // the shard holding it
    ReplicaKey key;              // and where that shard is
    LoadRank rank{};             // where it is filed in shard->by_load
    // Its entries there and, if it was complete when filed, in
    // complete_by_load: its holder's load changes with every plan and end
    // report, and the entries then move in place (Catalog::rerank) instead
    // of being looked up, freed and made again.
    LoadIndex *load_in = nullptr, *complete_in = nullptr;
    LoadIndex::iterator load_at{}, complete_at{};
    bool publisher = false;
    bool owned = false;     // a library-owned copy kept for retention
    bool mutating = false;  // its holder is about to overwrite it: not routed to
    // Filling, and its reader was told every live holder failed it: it
    // fills from nowhere for now, so nobody follows it until its reader's
    // next plan finds a source.
    bool sourceless = false;
    // Filling, and a reader found it answering but holding nothing new for a
    // while (SourceFailed.stalled): nobody is routed to it until its fill
    // level passes stalled_at (a Progress), its reader plans again or it is
    // complete. kMoving: not stalled.
    static constexpr uint32_t kMoving = UINT32_MAX;
    uint32_t stalled_at = kMoving;
    bool stalled() const { return !complete && stalled_at != kMoving; }
    // Chunks readers found not matching the version's checksums: not routed
    // to until its holder has checked its own copy of them.
    std::vector<uint32_t> reported;
    uint32_t active_reads = 0;
    bool complete = false;
    uint32_t chunks_done = 0;
    // Striped plans (docs/design.md, "Fan-out depth"): the stripe this filling
    // replica relays to others (-1: none), its depth in that stripe's tree
    // (1: read from a complete holder), and where it is filed among the
    // stripe's relays; and for every stripe, how many hops it is from a
    // complete holder (0: no source for that stripe yet).
    int32_t home = -1;
    uint32_t depth = kNoDepth;
    RelayRank relay_rank{};
    std::array<uint32_t, kMaxStripes> hops{};
    uint64_t seq = 0;
    uint64_t bytes_served = 0;
    ReplicaDesc desc;
};

// How many hops a reader of stripe i from r is from a complete holder
// (UINT32_MAX: r has no source for it yet).
inline uint32_t hops_through(const ReplicaInfo &r, uint32_t i) {
    if (r.complete) return 1;
    return r.hops[i] == 0 ? UINT32_MAX : r.hops[i] + 1;
}

// "publisher", "owned" (a spilled copy) or "replica" (a reader's): the kinds
// status and metrics count.
const char *replica_kind(const ReplicaInfo &r);

struct ShardInfo {
    bool published = false;  // a publisher has declared it (layout fixed)
    std::vector<TensorSpec> tensors;
    uint64_t total_bytes = 0;
    uint32_t num_chunks = 0;
    // XXH3-64 of each chunk, from the first publish that carried them; a
    // replica declaring others holds other bytes under the same version.
    std::vector<uint64_t> checksums;
    // Stripes readers that serve are planned in (1: none), fixed when it is
    // first published (PolicyConfig::stripes).
    uint32_t stripes = 1;
    std::map<uint64_t, ReplicaInfo> replicas;  // by replica id
    // Replicas by the host, rack and zone keys of their workers, so that a
    // plan finds a reader's neighbours without looking at every holder.
    std::unordered_map<std::string, std::vector<ReplicaInfo *>> nearby;
    // Replicas in the policy's load order, per datacenter, so that a reader
    // with no eligible neighbour takes the first eligible one in its own
    // datacenter (else the best first of the others) without weighing all.
    std::map<std::string, LoadIndex> by_load;
    // The same for complete replicas only: a plan that wants a holder of
    // every chunk does not walk past thousands of filling ones.
    std::map<std::string, LoadIndex> complete_by_load;
    // Filling replicas that relay a stripe, per (datacenter, stripe), the
    // shallowest with room first; and the home stripe the next one gets.
    std::map<std::pair<std::string, uint32_t>, std::set<std::pair<RelayRank, uint64_t>>> relays;
    uint32_t next_home = 0;
};

struct ReadRecord {
    uint64_t reader = 0;
    uint64_t source = 0;
    uint32_t shard = 0;
    uint64_t bytes = 0;
};

struct VersionInfo {
    uint64_t number = 0;
    uint32_t num_shards = 0;
    uint64_t chunk_bytes = 0;
    bool committed = false;
    std::vector<ShardInfo> shards;  // sized once: replicas point into it
    std::vector<ReadRecord> reads;
    uint32_t published_shards() const;
};

struct ModelInfo {
    std::string name;
    std::map<uint64_t, VersionInfo> versions;
    std::optional<uint64_t> latest;  // newest committed version
    std::map<uint64_t, std::set<uint64_t>> pins;  // version -> workers pinning it
};

}  // namespace th
