#include "client/client.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <random>
#include <string_view>
#include <thread>

#include "client/queries.hpp"
#include "client/source_wait.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "common/thread_name.hpp"
#include "common/trace.hpp"

namespace th {

namespace {

uint64_t random_id() {
    std::random_device rd;
    uint64_t id = 0;
    while (id == 0) id = (uint64_t(rd()) << 32) ^ rd();
    return id;
}

}  // namespace

Client::Client(ClientConfig cfg) : cfg_(std::move(cfg)), worker_id_(random_id()) {
    if (cfg_.server_url.empty()) fail(TH_ERR_INVALID_ARG, "server_url is required");
    if (cfg_.worker_name.empty()) {
        char host[256] = {0};
        gethostname(host, sizeof host - 1);
        cfg_.worker_name = str(host, "-", getpid());
    }
    if (cfg_.timeout_ms == 0 || cfg_.heartbeat_ms == 0 || cfg_.chunk_timeout_ms == 0 || cfg_.max_inflight == 0)
        fail(TH_ERR_INVALID_ARG, "timeouts, heartbeat period and max_inflight must be positive");
    if (!cfg_.labels.count("host")) {
        char host[256] = {0};
        gethostname(host, sizeof host - 1);
        cfg_.labels["host"] = host;
    }
    trace::event("worker", worker_id_);
    session_ = std::make_unique<ServerSession>(cfg_, worker_id_);
    // Readers give up on a source after chunk_timeout_ms without progress; a
    // process paused that long starts its UCX worker afresh and must then
    // tell the server its new address.
    ServerSession *session = session_.get();
    UcxOptions options;
    options.copy_threads = cfg_.copy_threads;
    ucx_ = std::make_unique<UcxWorker>(PauseRecovery{cfg_.chunk_timeout_ms,
                                                     [session](uint64_t) { session->address_changed(); }},
                                       options);
    ctrl_ = std::make_unique<ControlPage>(*ucx_);
    holdings_ = std::make_unique<Holdings>(cfg_, worker_id_, *session_, *ucx_, *ctrl_);
    session_->connect(*ucx_, *holdings_);
    // Off the caller's path: the first fetch finds UCX's endpoint
    // configuration made, or, racing it, waits for no more than before.
    // TENSORHUB_CONNECT_AHEAD=0 leaves it to the first fetch (to measure it).
    const char *ahead = std::getenv("TENSORHUB_CONNECT_AHEAD");
    if (ahead != nullptr && std::string_view(ahead) == "0") return;
    connect_ahead_ = std::thread([ucx = ucx_.get(), closing = &closing_, peers = session_->take_connect_ahead()] {
        name_this_thread("th-connect");
        if (peers.empty()) return;
        auto t = std::chrono::steady_clock::now();
        try {
            size_t up = ucx->connect_ahead(peers, closing);
            TH_LOG(Debug, "connected ahead to ", up, " of ", peers.size(), " workers in ",
                   std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count(), " ms");
        } catch (const std::exception &e) {
            TH_LOG(Info, "connecting ahead failed: ", e.what());
        }
    });
}

Client::~Client() {
    closing_ = true;  // a worker that does not answer holds nobody up
    if (connect_ahead_.joinable()) connect_ahead_.join();
    session_->stop_heartbeats();
    // Withdraw what we still hold; the handles stay valid for th_replica_release.
    holdings_->withdraw_all();
    session_->goodbye();
    holdings_.reset();  // and with it the owned copies
    session_->disconnect();
    ctrl_.reset();
    ucx_.reset();
}

std::unique_ptr<Replica> Client::publish(const std::string &model, uint64_t version, uint32_t shard,
                                         uint32_t num_shards, uint64_t chunk_bytes, std::vector<Buffer> buffers,
                                         SyncStats *stats, bool checksums) {
    return holdings_->publish(model, version, shard, num_shards, chunk_bytes, std::move(buffers), stats, checksums);
}

// Fetches again, within the fetch's deadline, when
// - no live holder may serve this reader now (it failed to read from each,
//   or they are still filling): the path to them may be what is broken,
//   and a reader fetching the version now may soon serve it
//   (server/reachability.hpp: the server plans this reader without the
//   sources it reported while it avoids them). For up to twice
//   chunk_timeout_ms without a source (SourceWait): the reader it waits for
//   may itself be waiting out a source that stalled;
// - the newest version was asked for, and the one being fetched lost its
//   last holder (or was forgotten for that) while a newer one was committed:
//   its holders moved on, while this reader waited on a source that stalled,
//   say. The newer one, at once.
// Each attempt is a whole fetch of the version asked for (the newest one
// committed by then, for TH_LATEST): a failed one takes back the replica it
// was filling, so that nobody waits on it meanwhile. Progress is passed on
// only once a later attempt has caught up with what the caller was shown.
// The stats describe the whole call: its time, and the failures and plans
// of every attempt that was given a source (SyncStats::add_earlier_attempt).
FetchResult Client::fetch(const FetchRequest &req, std::vector<Buffer> dst, bool serve) {
    constexpr int32_t kAgainMs = 100, kCancelPollMs = 20;
    Deadline deadline(fetch_timeout_ms(req, cfg_));
    const auto started = Clock::now();
    std::vector<SyncStats> earlier;  // attempts that were given a source
    SourceWait wait(std::chrono::milliseconds(2 * cfg_.chunk_timeout_ms));
    std::string last_failure;     // how the last source an attempt dropped failed
    uint64_t progress_shown = 0;  // the caller sees progress only go forward
    for (;;) {
        FetchRequest attempt = req;
        attempt.timeout_ms = static_cast<uint32_t>(std::max(deadline.remaining_ms(), 1));
        if (req.progress)
            attempt.progress = [&](uint64_t done, uint64_t total) {
                if (done < progress_shown && done != total) return;  // a later attempt catching up
                progress_shown = std::max(progress_shown, done);
                req.progress(done, total);
            };
        Fetch f(*session_, *holdings_, *ucx_, attempt, dst, serve);
        try {
            FetchResult r = f.run();
            for (const SyncStats &e : earlier) r.stats.add_earlier_attempt(e);
            r.stats.seconds = seconds_since(started);
            TH_LOG(Info, "fetched '", req.model, "' ", r.stats.fetch_summary(req.shard));
            return r;
        } catch (const wire::NoSourceYet &e) {
            bool had_source = f.had_source();
            if (had_source) earlier.push_back(f.stats());
            if (!f.last_failure().empty()) last_failure = f.last_failure();
            if (wait.begin(had_source, Clock::now()))
                TH_LOG(Info, e.what(), "; fetching again for up to ", wait.patience().count(), " ms");
            for (int32_t slept = 0; slept < kAgainMs; slept += kCancelPollMs) {
                if (wait.spent(Clock::now()) || deadline.remaining_ms() < kAgainMs)
                    fail(e.code(), e.what(), ", and no other came within ", wait.patience().count(), " ms",
                         last_failure.empty() ? "" : "; last failure here: ", last_failure);
                if (canceled(req.cancel))
                    fail(TH_ERR_CANCELED, "canceled while waiting for a holder this reader can read from");
                std::this_thread::sleep_for(std::chrono::milliseconds(kCancelPollMs));
            }
        } catch (const Error &e) {
            bool lost = e.code() == TH_ERR_UNAVAILABLE || e.code() == TH_ERR_NOT_FOUND;  // no holder, or forgotten
            if (req.version != UINT64_MAX || !lost || f.version() == 0 || deadline.expired()) throw;
            uint64_t newest = 0;
            try {
                newest = th::resolve(*session_, req.model, UINT64_MAX);
            } catch (const Error &) {  // the fetch's own error says more
            }
            if (newest <= f.version()) throw;
            earlier.push_back(f.stats());
            TH_LOG(Info, e.what(), "; fetching version ", newest, ", committed since");
        }
    }
}

uint64_t Client::resolve(const std::string &model, uint64_t version) { return th::resolve(*session_, model, version); }

void Client::pin(const std::string &model, uint64_t version) { set_pinned(*session_, model, version, true); }

void Client::unpin(const std::string &model, uint64_t version) { set_pinned(*session_, model, version, false); }

uint64_t Client::wait_for_version(const std::string &model, uint64_t newer_than, uint32_t timeout_ms,
                                  CancelFlag cancel) {
    return th::wait_for_version(*session_, model, newer_than, timeout_ms, cancel);
}

std::string Client::describe_json(const std::string &model, uint64_t version, uint32_t shard) {
    return th::describe_json(*session_, model, version, shard);
}

std::string Client::status_json() { return th::status_json(*session_); }

}  // namespace th
