// The library inside a worker process: UCX worker + control channel to the
// server + the replicas this process holds. th_client is this class.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "client/control_word.hpp"
#include "client/range_selection.hpp"
#include "client/spill_pool.hpp"
#include "client/sync_stats.hpp"
#include "common/deadline.hpp"
#include "common/labels.hpp"
#include "common/layout.hpp"
#include "control/rpc.hpp"
#include "control/subscriber.hpp"
#include "transport/worker.hpp"
#include "wire/replica_desc.hpp"
#include "wire/status_json.hpp"
#include "wire/wire.hpp"

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
};

// Caller memory holding one tensor of a replica or a fetch destination.
struct Buffer {
    TensorSpec spec;
    void *data = nullptr;
    th_mem_kind kind = TH_MEM_HOST;
};

class Client;

// One shard of one version held in this process's memory.
class Replica {
  public:
    ~Replica();
    uint64_t id() const { return id_; }
    uint64_t version() const { return version_; }

  private:
    friend class Client;
    friend class Fetch;
    friend Client *replica_client(const Replica &r);
    Client *client_ = nullptr;
    uint64_t id_ = 0;
    std::string model_;
    uint64_t version_ = 0;
    uint32_t shard_ = 0;
    uint32_t num_shards_ = 1;
    uint64_t chunk_bytes_ = 0;
    std::vector<Buffer> buffers_;
    // Owned copies only: the spill pool's memory the buffers point into.
    // Declared before regions_ so that it goes back to the pool after them.
    SpillPool::Lease storage_;
    std::vector<RegionRef> regions_;  // distinct registrations, in desc order
    ReplicaDesc desc_;
    std::vector<uint64_t> checksums_;  // of the version's chunks, declared with it; may be empty
    ControlPage::Slot ctrl_{};
    bool complete_ = false;
    bool mutating_ = false;  // begin_mutation succeeded: its buffers may change
    bool owned_ = false;     // a copy in library memory, made for retention
};

struct FetchRequest {
    std::string model;
    uint64_t version = UINT64_MAX;
    uint32_t shard = 0;
    uint32_t timeout_ms = 0;
    std::optional<std::string> tensor;  // partial fetch of one tensor
    uint64_t offset = 0;
    uint64_t length = 0;
    // th_fetch_ranges: these ranges of the shard, the destination of ranges[i]
    // being dst[i]. Empty: the whole shard, or the single tensor above.
    std::vector<RangeRequest> ranges;
    // Called on the fetching thread with (bytes done, bytes needed), at most
    // every progress_interval_ms and once at the end; may be empty.
    std::function<void(uint64_t, uint64_t)> progress;
    uint32_t progress_interval_ms = TH_DEFAULT_PROGRESS_INTERVAL_MS;
    th_verify verify = TH_DEFAULT_VERIFY;  // which chunks are checked against the version's checksums
};

struct FetchResult {
    uint64_t version = 0;
    std::unique_ptr<Replica> replica;  // set when the fetch was asked to serve
    SyncStats stats;
};

class Client {
  public:
    explicit Client(ClientConfig cfg);
    ~Client();

    uint64_t worker_id() const { return worker_id_; }
    const ClientConfig &config() const { return cfg_; }

    // stats (may be null) receives the publish's summary. With checksums,
    // every chunk's checksum is computed and declared with the version.
    std::unique_ptr<Replica> publish(const std::string &model, uint64_t version, uint32_t shard, uint32_t num_shards,
                                     uint64_t chunk_bytes, std::vector<Buffer> buffers, SyncStats *stats = nullptr,
                                     bool checksums = TH_DEFAULT_CHECKSUMS != 0);
    FetchResult fetch(const FetchRequest &req, std::vector<Buffer> dst, bool serve);
    uint64_t resolve(const std::string &model, uint64_t version);
    // Withdraws the replica. With retain, the retention policy applies first
    // when it is the last complete copy of a required version.
    void release(Replica &replica, bool retain = true);
    void begin_mutation(Replica &replica);
    // Keeps (model, version) required until unpin (th_pin / th_unpin).
    void pin(const std::string &model, uint64_t version) { set_pinned(model, version, true); }
    void unpin(const std::string &model, uint64_t version) { set_pinned(model, version, false); }
    uint64_t wait_for_version(const std::string &model, uint64_t newer_than, uint32_t timeout_ms);
    std::string describe_json(const std::string &model, uint64_t version, uint32_t shard);
    std::string status_json();

    // Sends a request built by build(builder, header) and returns the reply
    // envelope bytes. Error replies become Error exceptions; an "unknown
    // worker" reply makes the client register again and retry once.
    template <typename Build>
    wire::Bytes call(Build &&build, const Deadline &deadline);

    UcxWorker &ucx() { return *ucx_; }
    // What the memory for owned copies holds now.
    SpillPool::Usage spill_usage() const { return spill_pool_->usage(); }

    // True for a while after this client registered again with a replaced
    // server: holders are still re-declaring what they hold there, so a
    // version that looks unknown may just not be back yet.
    bool rebuilding() const { return Clock::now() < rebuilt_by_.load(); }
    ControlPage &control_page() { return *ctrl_; }

  private:
    friend class Fetch;
    // recover: on "unknown worker", a stale or an unreachable server,
    // register again or fail over and retry. Off inside re-registration.
    wire::Bytes call_raw(const std::function<wire::Bytes(wire::Builder &, const wire::Header &)> &build,
                         const Deadline &deadline, bool recover = true);
    void hello(const Deadline &deadline);
    void reregister(const Deadline &deadline);
    void heartbeat_loop();
    void beat();
    // Whether the last Hello gave the server the UCX address we have now.
    bool registered_address_is_current();
    void on_event(const uint8_t *data, size_t size);
    // Asks the server to stop routing to r and applies the retention policy;
    // returns the number of reads still planned onto it.
    uint32_t prepare_to_give_up(Replica &r, const Deadline &deadline);
    void spill(const Replica &r);
    void drop_owned(const std::vector<uint64_t> &ids);
    void set_pinned(const std::string &model, uint64_t version, bool pinned);
    Replica *prepare_replica(std::unique_ptr<Replica> &r, std::vector<Buffer> &buffers);
    void send_publish(const Replica &r, const Deadline &deadline, bool recover = true);
    void remember(Replica *r);
    void forget(Replica *r);
    wire::Header header();

    ClientConfig cfg_;
    uint64_t worker_id_;
    std::unique_ptr<UcxWorker> ucx_;
    std::unique_ptr<ControlPage> ctrl_;
    std::unique_ptr<SpillPool> spill_pool_;  // memory for owned copies
    // The server in use: servers_[current_], reached through rpc_. Swapped
    // under rpc_mu_ on failover; callers hold their own reference.
    std::shared_ptr<RpcClient> rpc();
    // Index of the answering server with the newest epoch (0 if none answers).
    size_t newest_server(const Deadline &deadline);
    void fail_over(const std::shared_ptr<RpcClient> &from, const std::string &why, const Deadline &deadline);
    std::vector<std::string> servers_;
    size_t current_ = 0;
    std::mutex rpc_mu_;
    std::shared_ptr<RpcClient> rpc_;
    std::atomic<uint64_t> max_epoch_{0};  // the newest server epoch seen: older servers are stale
    std::atomic<uint64_t> next_request_{1};
    std::atomic<uint64_t> next_replica_{1};
    std::atomic<uint64_t> registrations_{0};  // bumped each time we (re)register
    std::mutex hello_mu_;
    std::vector<uint8_t> hello_address_;  // the UCX address the last Hello gave the server
    std::atomic<uint32_t> lease_ms_{TH_DEFAULT_LEASE_MS};  // the server's, from HelloReply
    std::atomic<Clock::time_point> rebuilt_by_{Clock::time_point{}};

    std::mutex reg_mu_;  // serializes re-registration and guards held_ and owned_
    std::map<uint64_t, Replica *> held_;
    std::map<uint64_t, std::unique_ptr<Replica>> owned_;  // spilled copies, by id

    // Server events (commits) and what they told us.
    std::mutex ev_mu_;
    std::condition_variable ev_cv_;
    std::map<std::string, uint64_t> latest_seen_;
    uint64_t event_seq_ = 0;
    bool event_gap_ = false;
    std::unique_ptr<Subscriber> events_;

    std::mutex hb_mu_;
    std::condition_variable hb_cv_;
    bool stop_ = false;
    bool reregister_asked_ = false;  // the UCX worker has a new address
    std::thread heartbeat_;
};

template <typename Build>
wire::Bytes Client::call(Build &&build, const Deadline &deadline) {
    return call_raw(std::forward<Build>(build), deadline);
}

// Asks the server at url for its status without registering a worker; an
// http:// url is the server's HTTP endpoint (GET url/api/status).
std::string query_status(const std::string &url, uint32_t timeout_ms, const std::string &token);

// The client a replica belongs to, or nullptr once that client is destroyed.
Client *replica_client(const Replica &r);

}  // namespace th
