// One simulated weight update: a trainer publishes a version and readers
// (rollouts, joiners, another datacenter) fetch it, by tensorhub (plans from
// the real metadata service, pipelined replication) or by a baseline.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace th::sim {

enum class Method { TensorHub, TrainerDirect, Collective, Store };
const char *method_name(Method m);

enum class Workload { Standalone, Elastic, CrossDc };
const char *workload_name(Workload w);

struct Setup {
    Workload workload = Workload::Standalone;
    uint32_t readers = 8;          // rollouts, joiners or remote rollouts: one GPU each
    uint32_t holders = 0;          // elastic: workers already holding the version
    uint64_t size_bytes = 256ull << 20;
    double host_bps = 1e9 / 8 * 0.9587;  // per NIC direction, goodput
    double wan_bps = 0;            // cross_dc: each direction of the WAN link
    uint32_t hosts_per_rack = 32;
    double rack_oversub = 1;       // > 1: racks get uplinks of hosts*B/oversub
    double stagger_s = 0;          // readers ready uniformly in [0, stagger_s]
    // Reader i is ready ready_offsets_s[i] seconds after the start; when not
    // empty it replaces the stagger_s draw (a measured run's ready times).
    std::vector<double> ready_offsets_s;
    uint64_t chunk_bytes = 4ull << 20;       // tensorhub's default chunk
    uint32_t max_inflight = 8;               // GETs in flight per fetch (client default)
    uint64_t collective_segment = 256 << 10; // pipelined broadcast segment
    bool store_pipelined = false;  // store readers may read values as they are pushed
    double rtt_s = 50e-6;          // one control-word read
    double poll_s = 200e-6;        // a follower re-reads a filling source's word this often
    double detect_s = 0.1;         // a reader notices a dead source
    double train_step_s = -1;      // publish -> optimizer step; < 0: 2 x S/B
    double copy_bps = 10e9;        // spilling an owned copy (device -> host)
    uint32_t preempt = 0;          // holders/readers lost mid-update (spot)
    double preempt_at_s = -1;      // < 0: half of S/B
    uint32_t heartbeat_ms = 0;     // 0: no heartbeats simulated
    uint32_t max_readers_per_source = 2;
    uint32_t stripes = 0;            // tensorhub: th_server_config.stripes (0: automatic; 1: chains)
    double stripe_wait_s = 0.002;    // a striped reader asks again for stripes left out (client's kStripeWait)
    uint64_t seed = 1;
};

struct Result {
    Method method{};
    double makespan_s = 0, floor_s = 0;
    double reader_stall_s = 0, trainer_stall_s = 0, holder_stall_s = 0;
    double update_s = 0;  // last reader done - first reader ready
    uint64_t bytes_from_trainer = 0, bytes_from_replicas = 0, bytes_from_store = 0, wan_bytes = 0;
    uint32_t depth_max = 0;
    double depth_mean = 0;
    uint32_t replans = 0;
    std::map<std::string, uint64_t> messages;
    uint64_t plans = 0;
    double plan_seconds = 0, plan_max_seconds = 0, handle_seconds = 0;
    double wall_s = 0;
    uint64_t events = 0, recomputed_flows = 0;
    std::vector<std::string> violations;  // broken invariants
    double total_stall() const { return reader_stall_s + trainer_stall_s + holder_stall_s; }
};

// When each reader becomes ready, in seconds from the start, in reader
// order: ready_offsets_s when given, else seeded draws in [0, stagger_s].
// Every method starts its readers at these times. Throws
// std::invalid_argument for offsets that do not fit the setup.
std::vector<double> reader_ready_times(const Setup &setup);

Result simulate(const Setup &setup, Method method);

}  // namespace th::sim
