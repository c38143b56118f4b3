// Source selection: given who holds a shard and who asks, pick the source a
// reader should read from. Pure: no locks, no I/O, no clock, so it is unit
// tested rule by rule and can be driven by a simulator.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "common/labels.hpp"
#include "tensorhub/tensorhub.h"

namespace th {

// How far apart two workers are. Smaller is cheaper.
enum class Distance : int { SameHost = 0, SameRack = 1, SameDc = 2, OtherDc = 3 };

// Labels used: "host", "rack" (or "zone"), "dc". A missing "dc" on both sides
// counts as the same datacenter; a missing host or rack never matches.
Distance distance(const Labels &a, const Labels &b);

// The groups a worker belongs to, as keys ("" where a label is missing): two
// workers with the same host key are at SameHost; two at distance SameRack
// share a rack or a zone key. Lets the server index the holders of a shard
// by place and look at a reader's neighbours before everyone else.
struct Neighbourhood {
    std::string dc;  // the label itself, "" when missing
    std::string host, rack, zone;
};
Neighbourhood neighbourhood(const Labels &labels);

struct Candidate {
    uint64_t worker_id = 0;
    uint64_t replica_id = 0;
    const Labels *labels = nullptr;
    bool complete = false;      // holds every chunk; false: still filling
    uint32_t active_reads = 0;  // readers currently planned onto this worker
    uint64_t seq = 0;           // registration order of the replica
    uint64_t bytes_served = 0;  // by this worker so far
    bool publisher_side = false;  // the publisher's own buffers or its owned copy:
                                  // its uplink is the trainer's
};

struct PolicyConfig {
    // A source with this many active readers is skipped while another source
    // at the same distance has room.
    uint32_t max_readers_per_source = TH_DEFAULT_MAX_READERS_PER_SOURCE;
    // Stripes a shard is cut into for readers that serve (1: none; 0: 8 when
    // the cluster has kAutoStripesWorkers workers or more, else none); fewer
    // when the shard has few chunks (common/stripes.hpp).
    uint32_t stripes = TH_DEFAULT_STRIPES;
};

struct Request {
    const Labels *labels = nullptr;
    uint64_t reader_worker = 0;
    // Registration order of the reader's own replica, 0 if it does not serve.
    // A still-filling source is only eligible when it registered before the
    // reader, so that followers never form a cycle.
    uint64_t reader_seq = 0;
    std::vector<uint64_t> exclude;           // workers that failed this reader
    std::vector<uint64_t> exclude_replicas;  // replicas that changed under it
    bool complete_only = false;  // only holders of every chunk
    uint32_t below_reads = UINT32_MAX;  // only sources with fewer active readers
};

// With stripes = 0, a shard published while at least this many workers are
// registered is striped in kAutoStripes: a stripe flows at 1/K of a link, so
// each hop of its tree waits K times longer for a chunk than a chain link
// does, and trees of depth d only beat a chain of N when N > d x K.
constexpr uint32_t kAutoStripes = 8;
constexpr uint32_t kAutoStripesWorkers = 24;

// Whether req rules c out by name: c is the reader, or failed or changed under it.
bool excluded(const Request &req, const Candidate &c);
// Whether c may serve req at all, whatever its distance and load.
bool eligible(const Request &req, const Candidate &c);

// How the policy ranks eligible sources at the same distance: smaller first.
using LoadRank = std::tuple<bool, uint32_t, bool, bool, uint64_t, uint64_t>;
LoadRank load_rank(const Candidate &c, const PolicyConfig &cfg);

// How many readers of its stripe a relay takes: a reader of one of K stripes
// costs it S/K of upload, so K of them are one shard's worth, what a chain
// link sends (max_readers_per_source / 2 shards' worth: one by default).
// With N readers, N/K relays of a stripe have N places for its N - 1
// readers: every relay sends about S, and none more.
uint32_t stripe_room(uint32_t stripes, const PolicyConfig &cfg);
// How relays of one stripe rank for a reader of that stripe, smaller first:
// by room (0: no reader yet, 1: under its room, 2: full), then the
// shallowest in the stripe's tree, then the fewest active readers; full
// ones the least loaded first (a reader taken beyond a relay's room is
// spread, not piled on the top of the tree); then the oldest.
using RelayRank = std::tuple<uint8_t, uint32_t, uint32_t, uint64_t>;
RelayRank relay_rank(const Candidate &c, uint32_t depth, uint32_t stripes, const PolicyConfig &cfg);

// Index into candidates of the chosen source, or nullopt when none is eligible.
// Order: distance; then sources under the fan-out cap; then fewest active
// readers; then any source before the publisher's side (keeps load off the
// trainer's uplink; with fewest-active-readers first, this lets chains form);
// then complete before filling (an idle holder serves at full speed, a
// filling one only as fast as it fills); then the one that served the fewest
// bytes; then the oldest replica.
std::optional<size_t> choose_source(const Request &req, const std::vector<Candidate> &candidates,
                                    const PolicyConfig &cfg);

}  // namespace th
