#include "client/serving_replica.hpp"

#include <atomic>

#include "common/log.hpp"

namespace th {

namespace {
// How often the server hears how far a serving reader's replica has filled.
constexpr uint32_t kProgressReportMs = 200;
}  // namespace

ServingReplica::ServingReplica(Holdings &holdings, ServerSession &session, const std::string &model, uint32_t shard,
                               std::vector<Buffer> buffers)
    : holdings_(holdings), session_(session), registrations_at_start_(session.registrations()),
      replica_(holdings.prepare(model, shard, std::move(buffers))) {}

void ServingReplica::start_reporting() {
    if (!reporter_)
        reporter_ = std::make_unique<ProgressReporter>(session_, replica_->id(), replica_->control_word(), kProgressReportMs);
}

void ServingReplica::filled(uint32_t chunks) {
    replica_->control_word()->chunks_done.store(chunks, std::memory_order_release);
}

void ServingReplica::set_stripes(uint32_t k) {
    replica_->control_word()->stripes.store(k, std::memory_order_release);
}

void ServingReplica::stripe_filled(uint32_t stripe, uint32_t chunks) {
    replica_->control_word()->stripe_done[stripe].store(chunks, std::memory_order_release);
}

void ServingReplica::complete(uint32_t num_chunks) {
    replica_->mark_complete();
    replica_->mark_committed();  // only a committed version is read
    ControlWord *w = replica_->control_word();
    // Every stripe full too: a waiting read may watch its stripe's level.
    uint32_t k = w->stripes.load();
    for (uint32_t i = 0; i < k && i < kMaxStripes; ++i)
        w->stripe_done[i].store(stripe_begin(num_chunks, k, i + 1) - stripe_begin(num_chunks, k, i),
                                std::memory_order_release);
    w->chunks_done.store(num_chunks, std::memory_order_release);
}

void ServingReplica::abandon() {
    if (replica_) holdings_.abandon(std::move(replica_));
}

std::unique_ptr<Replica> ServingReplica::hold() {
    holdings_.remember(replica_.get());
    // The server was replaced during the fetch and never saw this replica
    // register: declare it now that it is complete. The bytes are here either
    // way; a failure only delays serving until the next re-registration.
    if (session_.registrations() != registrations_at_start_) {
        try {
            holdings_.declare(*replica_, Deadline(session_.config().timeout_ms));
        } catch (const std::exception &e) {
            TH_LOG(Warn, "declaring the fetched replica to the new server failed: ", e.what());
        }
    }
    return std::move(replica_);
}

}  // namespace th
