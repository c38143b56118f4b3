// The replica a fetch that serves fills as it reads. Every plan request
// declares it, so that the server may route other readers to it while it
// fills; its control word's chunks_done follows the confirmed prefix of the
// shard, so that they can read right behind it; a thread of its own reports
// its fill level to the server. Once complete, it joins what this worker holds.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "client/holdings.hpp"
#include "client/progress_reporter.hpp"
#include "client/replica.hpp"
#include "client/server_session.hpp"

namespace th {

class ServingReplica {
  public:
    ServingReplica(Holdings &holdings, ServerSession &session, const std::string &model, uint32_t shard,
                   std::vector<Buffer> buffers);

    const Replica &replica() const { return *replica_; }
    // The plan told which version it fills.
    // The version's checksums, declared with the replica when it registers again.
    void set_checksums(std::vector<uint64_t> sums) { replica_->set_checksums(std::move(sums)); }
    void set_version(uint64_t version, uint32_t num_shards, uint64_t chunk_bytes) {
        replica_->set_version(version, num_shards, chunk_bytes);
    }
    // Starts the fill-level reports (once the version is planned).
    void start_reporting();
    // No Progress after FetchDone.
    void stop_reporting() { reporter_.reset(); }
    // The first `chunks` chunks are confirmed: followers may read them.
    void filled(uint32_t chunks);
    // The fetch is planned in k stripes: the control word says how far each
    // has filled (stripe_filled), for followers of one stripe.
    void set_stripes(uint32_t k);
    void stripe_filled(uint32_t stripe, uint32_t chunks);
    void complete(uint32_t num_chunks);
    // The fetch failed: the replica is dropped, its control word given back.
    void abandon();
    // The fetch succeeded: the replica is held, and declared to a server
    // that replaced the one the fetch started with (which never saw it
    // register). Returns the handle for the caller.
    std::unique_ptr<Replica> hold();

  private:
    Holdings &holdings_;
    ServerSession &session_;
    uint64_t registrations_at_start_;
    std::unique_ptr<Replica> replica_;
    std::unique_ptr<ProgressReporter> reporter_;
};

}  // namespace th
