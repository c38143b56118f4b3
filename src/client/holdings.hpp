// What this worker holds and the life of each replica: publishing, releasing,
// begin-mutation under the retention policy, owned copies spilled for
// retention and freed once no longer required, and declaring everything again
// to a server that forgot this worker.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "client/client_config.hpp"
#include "client/control_word.hpp"
#include "client/replica.hpp"
#include "client/server_session.hpp"
#include "client/spill_pool.hpp"
#include "client/sync_stats.hpp"
#include "common/deadline.hpp"
#include "transport/worker.hpp"

namespace th {

class Holdings : public SessionListener {
  public:
    Holdings(const ClientConfig &cfg, uint64_t worker_id, ServerSession &session, UcxWorker &ucx, ControlPage &page);
    ~Holdings() override;

    // stats (may be null) receives the publish's summary. With checksums,
    // every chunk's checksum is computed and declared with the version.
    std::unique_ptr<Replica> publish(const std::string &model, uint64_t version, uint32_t shard, uint32_t num_shards,
                                     uint64_t chunk_bytes, std::vector<Buffer> buffers, SyncStats *stats = nullptr,
                                     bool checksums = TH_DEFAULT_CHECKSUMS != 0);
    // Withdraws the replica. With retain, the retention policy applies first
    // when it is the last complete copy of a required version.
    void release(Replica &replica, bool retain = true);
    void begin_mutation(Replica &replica);
    // At shutdown: withdraws every replica without retention (the process is
    // going away) and detaches the handles from this client.
    void withdraw_all();

    // For a fetch that serves what it reads: a replica over buffers, not yet
    // declared to the server nor held.
    std::unique_ptr<Replica> prepare(const std::string &model, uint32_t shard, std::vector<Buffer> buffers);
    // Gives a replica that never became held (its publish or fetch failed)
    // its control word back.
    void abandon(std::unique_ptr<Replica> replica);
    // Sends Publish for r: declares it (again: to a server that took over) to
    // the server.
    // Marks r committed when the reply says its version is.
    void declare(Replica &r, const Deadline &deadline, bool recover = true, bool again = false);
    // Held: released at shutdown and declared again on re-registration.
    void remember(Replica *r);
    // A replica's handle destroyed without release: it stops being held here
    // (its control word tells readers it is gone) and the server forgets it
    // with this worker's lease or at the next re-registration.
    void drop_unreleased(Replica &r);
    // What the memory for owned copies holds now.
    SpillPool::Usage spill_usage() const { return pool_.usage(); }
    // Owned copies made ahead (spill_ahead) and not yet taken or dropped,
    // and how many of them are finished.
    std::pair<size_t, size_t> copies_ahead();

    // SessionListener
    void register_again(const std::function<bool()> &hello, const Deadline &deadline) override;
    void drop_owned(const std::vector<uint64_t> &ids) override;
    void check_reported(uint64_t replica_id, std::vector<uint32_t> chunks) override;

  private:
    uint64_t new_id();
    // No longer held: not declared again, and its control word tells readers
    // still on it that it is gone.
    void forget(Replica &r);
    // Ends r's generation (Replica::end_generation) and gives its control
    // word back: what every replica that stops being served goes through.
    void let_go(Replica &r);
    // Asks the server to stop routing to r and applies the retention policy;
    // returns the number of reads still planned onto it.
    uint32_t prepare_to_give_up(Replica &r, const Deadline &deadline);
    void spill(const Replica &r);
    // Memory for an owned copy of `bytes`, once the copies no longer
    // required have given theirs back.
    Replica::Storage slab_for(uint64_t bytes);

    // spill_ahead: the copy a spill of a published replica would make, made
    // on a thread of its own right after the publish. A spill takes it (after
    // waiting for the rest of it); giving the replica up otherwise drops it.
    struct AheadCopy {
        Replica::Storage storage;
        std::vector<Buffer> buffers;  // the replica's, in storage
        std::atomic<bool> stop{false};
        std::atomic<bool> done{false};  // set by the thread: every byte copied
        std::string failed;        // set by the thread: why it did not copy
        std::thread thread;
    };
    void start_ahead(const Replica &r, uint64_t total);
    std::unique_ptr<AheadCopy> remove_ahead(uint64_t replica_id);
    // The replica's copy made ahead, finished (nullptr: none, or it failed).
    std::unique_ptr<AheadCopy> take_ahead(uint64_t replica_id);
    // Stops and drops the replica's copy made ahead, if any.
    void drop_ahead(uint64_t replica_id);

    const ClientConfig cfg_;
    uint64_t worker_id_;
    ServerSession &session_;
    UcxWorker &ucx_;
    ControlPage &page_;
    std::atomic<uint64_t> next_replica_{1};
    SpillPool pool_;  // memory for owned copies; outlives them (declared before owned_)

    std::mutex mu_;  // serializes re-registration and guards held_ and owned_
    std::map<uint64_t, Replica *> held_;
    std::map<uint64_t, std::unique_ptr<Replica>> owned_;  // spilled copies, by id
    std::mutex ahead_mu_;
    std::map<uint64_t, std::unique_ptr<AheadCopy>> ahead_;  // by the published replica's id
};

}  // namespace th
