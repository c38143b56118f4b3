// The library inside a worker process; th_client is this class. It puts
// together a UCX worker, the session with the server (server_session.hpp),
// the replicas this process holds (holdings.hpp), fetches (fetch.hpp) and
// queries (queries.hpp), and forwards each call to the part that does it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "client/client_config.hpp"
#include "client/control_word.hpp"
#include "client/fetch.hpp"
#include "client/holdings.hpp"
#include "client/replica.hpp"
#include "client/server_session.hpp"
#include "client/sync_stats.hpp"
#include "common/deadline.hpp"
#include "transport/worker.hpp"

namespace th {

class Client {
  public:
    explicit Client(ClientConfig cfg);
    // Withdraws every replica still held (without retention) and detaches
    // their handles, then says goodbye to the server.
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
    void release(Replica &replica, bool retain = true) { holdings_->release(replica, retain); }
    void begin_mutation(Replica &replica) { holdings_->begin_mutation(replica); }
    // Keeps (model, version) required until unpin (th_pin / th_unpin).
    void pin(const std::string &model, uint64_t version);
    void unpin(const std::string &model, uint64_t version);
    uint64_t wait_for_version(const std::string &model, uint64_t newer_than, uint32_t timeout_ms,
                              CancelFlag cancel = nullptr);
    std::string describe_json(const std::string &model, uint64_t version, uint32_t shard);
    std::string status_json();

    UcxWorker &ucx() { return *ucx_; }
    // What the memory for owned copies holds now.
    SpillPool::Usage spill_usage() const { return holdings_->spill_usage(); }
    std::pair<size_t, size_t> copies_ahead() { return holdings_->copies_ahead(); }

  private:
    ClientConfig cfg_;
    uint64_t worker_id_;
    std::unique_ptr<ServerSession> session_;
    std::unique_ptr<UcxWorker> ucx_;
    std::unique_ptr<ControlPage> ctrl_;
    std::unique_ptr<Holdings> holdings_;
    std::thread connect_ahead_;  // connects to the workers the server suggested
    std::atomic<bool> closing_{false};  // tells it to stop waiting
};

}  // namespace th
