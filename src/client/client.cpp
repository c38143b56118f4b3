#include "client/client.hpp"

#include <unistd.h>

#include <optional>
#include <random>
#include <thread>

#include "client/checksum.hpp"
#include "common/error.hpp"
#include "common/faults.hpp"
#include "common/log.hpp"
#include "control/http_get.hpp"
#include "transport/memory_kind.hpp"
#include "wire/auth.hpp"

namespace th {

namespace fb = flatbuffers;
using namespace wire;

namespace {

uint64_t random_id() {
    std::random_device rd;
    uint64_t id = 0;
    while (id == 0) id = (uint64_t(rd()) << 32) ^ rd();
    return id;
}

// The server announces its event URL as it bound it ("tcp://0.0.0.0:port" when
// it listens on all interfaces): dial the host we reach the server at instead.
std::string reachable_events_url(const std::string &server_url, const std::string &events_url) {
    if (server_url.rfind("tcp", 0) != 0 || events_url.rfind("tcp", 0) != 0) return events_url;
    size_t s = server_url.rfind(':'), e = events_url.rfind(':');
    if (s == std::string::npos || e == std::string::npos) return events_url;
    return server_url.substr(0, s) + events_url.substr(e);
}

}  // namespace

// A released replica's registrations are withdrawn unless another replica
// still uses them (docs/security.md): the rkeys handed out for it stop working.
Replica::~Replica() {
    if (client_ == nullptr) return;  // detached at shutdown
    regions_.clear();
    client_->ucx().withdraw_unused();
}

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
    for (size_t pos = 0; pos <= cfg_.server_url.size();) {
        size_t comma = std::min(cfg_.server_url.find(',', pos), cfg_.server_url.size());
        std::string url = cfg_.server_url.substr(pos, comma - pos);
        if (!url.empty()) servers_.push_back(url);
        pos = comma + 1;
    }
    if (servers_.empty()) fail(TH_ERR_INVALID_ARG, "server_url names no server");
    // Readers give up on a source after chunk_timeout_ms without progress; a
    // process paused that long starts its UCX worker afresh and must then
    // tell the server its new address.
    ucx_ = std::make_unique<UcxWorker>(PauseRecovery{cfg_.chunk_timeout_ms, [this](uint64_t) {
                                                         std::lock_guard lk(hb_mu_);
                                                         reregister_asked_ = true;
                                                         hb_cv_.notify_all();
                                                     }});
    ctrl_ = std::make_unique<ControlPage>(*ucx_);
    spill_pool_ = std::make_unique<SpillPool>(*ucx_, cfg_.spill_pool_bytes);
    // With several servers, start with the one of the newest epoch: a server
    // that was paused or cut off and came back is behind the one that took
    // over. Otherwise the first that answers, each given its share of the time.
    Deadline deadline(cfg_.timeout_ms);
    size_t first = servers_.size() > 1 ? newest_server(deadline) : 0;
    for (size_t i = first;; ++i) {
        current_ = i % servers_.size();
        rpc_ = std::make_shared<RpcClient>(servers_[current_], cfg_.token);
        try {
            size_t left = servers_.size() - std::min(i - first, servers_.size() - 1);
            hello(deadline.capped(std::max<uint32_t>(deadline.remaining_ms() / static_cast<uint32_t>(left), 1)));
            break;
        } catch (const Error &e) {
            if ((e.code() != TH_ERR_UNAVAILABLE && e.code() != TH_ERR_TIMEOUT) || deadline.expired()) throw;
            TH_LOG(Info, "server ", servers_[current_], " did not answer: ", e.what());
        }
    }
    heartbeat_ = std::thread([this] { heartbeat_loop(); });
}

Client::~Client() {
    {
        std::lock_guard lk(hb_mu_);
        stop_ = true;
    }
    hb_cv_.notify_all();
    if (heartbeat_.joinable()) heartbeat_.join();
    // Withdraw what we still hold; the handles stay valid for th_replica_release.
    std::vector<Replica *> held;
    {
        std::lock_guard lk(reg_mu_);
        for (auto &[id, r] : held_) held.push_back(r);
    }
    for (Replica *r : held) {
        try {
            release(*r, /*retain=*/false);  // the process is going away: nothing to spill into
        } catch (const std::exception &e) {
            TH_LOG(Info, "releasing replica ", r->id_, " at shutdown: ", e.what());
        }
        // Detached: the handle stays valid for th_replica_release, but it
        // must not keep registrations alive past the UCX context.
        r->client_ = nullptr;
        r->regions_.clear();
    }
    try {
        call([](Builder &b, const Header &h) { return wire::finish(b, h, CreateGoodbye(b)); },
             Deadline(std::min<uint32_t>(cfg_.timeout_ms, 1000)));
    } catch (const std::exception &e) {
        TH_LOG(Info, "goodbye to the server failed: ", e.what());
    }
    {
        std::lock_guard lk(reg_mu_);
        owned_.clear();
    }
    spill_pool_.reset();
    events_.reset();
    rpc_.reset();
    ctrl_.reset();
    ucx_.reset();
}

size_t Client::newest_server(const Deadline &deadline) {
    size_t best = 0;
    uint64_t best_epoch = 0;
    for (size_t i = 0; i < servers_.size(); ++i) {
        try {
            RpcClient rpc(servers_[i], cfg_.token);
            Builder b(64);
            Header h;
            h.request_id = next_request_++;
            // A fixed share of the whole budget, so that a silent server
            // cannot leave none for the Hello that follows.
            uint32_t share = std::max<uint32_t>(cfg_.timeout_ms / static_cast<uint32_t>(servers_.size() + 1), 1);
            Bytes reply = rpc.call(finish(b, h, CreatePing(b)), deadline.capped(share));
            const Envelope *env = verify(reply.data(), reply.size());
            TH_LOG(Debug, "server ", servers_[i], " answers with epoch ", env->epoch());
            if (env->body_type() == Body::Pong && env->body_as_Pong()->server_epoch() > best_epoch) {
                best = i;
                best_epoch = env->body_as_Pong()->server_epoch();
            }
        } catch (const Error &e) {
            TH_LOG(Info, "server ", servers_[i], " did not answer: ", e.what());
        }
    }
    TH_LOG(Info, "starting with server ", servers_[best], " (epoch ", best_epoch, ")");
    return best;
}

Header Client::header() {
    Header h;
    h.request_id = next_request_++;
    h.worker_id = worker_id_;
    h.epoch = max_epoch_.load();
    return h;
}

std::shared_ptr<RpcClient> Client::rpc() {
    std::lock_guard lk(rpc_mu_);
    return rpc_;
}

// Moves to the next server of the list and registers there (with everything
// we hold), unless another thread already moved on from `from`.
void Client::fail_over(const std::shared_ptr<RpcClient> &from, const std::string &why, const Deadline &deadline) {
    {
        std::lock_guard lk(rpc_mu_);
        if (rpc_ != from) return;
        current_ = (current_ + 1) % servers_.size();
        TH_LOG(Warn, "server ", from->url(), ": ", why, "; failing over to ", servers_[current_]);
        rpc_ = std::make_shared<RpcClient>(servers_[current_], cfg_.token);
        rebuilt_by_ = Clock::now() + std::chrono::milliseconds(lease_ms_.load() + cfg_.timeout_ms);
        // Going round the whole list: give the servers a moment.
        if (current_ == 0) std::this_thread::sleep_for(std::chrono::milliseconds(std::min(100, deadline.remaining_ms())));
    }
    reregister(deadline);
}

Bytes Client::call_raw(const std::function<Bytes(Builder &, const Header &)> &build, const Deadline &deadline,
                       bool recover) {
    for (int reregistered = 0;;) {
        std::shared_ptr<RpcClient> rpc = this->rpc();
        Bytes reply;
        try {
            Builder b(512);
            // With servers to fail over to, one server may use only half of
            // the time left, so that the next one still gets a chance.
            bool can_fail_over = recover && servers_.size() > 1;
            Deadline attempt = can_fail_over ? deadline.capped(std::max(deadline.remaining_ms() / 2, 1)) : deadline;
            reply = rpc->call(build(b, header()), attempt);
        } catch (const Error &e) {
            // Not answering: the next server of the list, while time is left.
            // A server that does not answer in time (dead, paused, cut off)
            // is left for the next; should it come back, epochs fence it.
            bool next = e.code() == TH_ERR_UNAVAILABLE || e.code() == TH_ERR_TIMEOUT;
            if (!recover || !next || servers_.size() == 1 || deadline.expired()) throw;
            try {
                fail_over(rpc, e.what(), deadline);
            } catch (const Error &) {
                if (deadline.expired()) throw;
            }
            continue;
        }
        const Envelope *env = verify(reply.data(), reply.size());
        bool stale = env->epoch() < max_epoch_.load() ||
                     (env->body_type() == Body::ErrorReply && env->body_as_ErrorReply()->stale_server());
        if (stale) {
            std::string why = str("stale (epoch ", env->epoch(), ", newest seen ", max_epoch_.load(), ")");
            if (!recover || (servers_.size() == 1 && reregistered++ >= 2))
                fail(TH_ERR_UNAVAILABLE, "the server at ", rpc->url(), " is ", why);
            // With one server (restarted with a clock behind), saying Hello
            // again makes it take over above the epoch we saw.
            servers_.size() == 1 ? reregister(deadline) : fail_over(rpc, why, deadline);
            continue;
        }
        if (env->body_type() != Body::ErrorReply) return reply;
        const ErrorReply *e = env->body_as_ErrorReply();
        // The server took over moments ago: holders are still re-declaring
        // what they hold. Ask again while the caller's time lasts.
        if (e->rebuilding() && recover && deadline.remaining_ms() > 100) {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            continue;
        }
        if (e->unknown_worker() && recover && reregistered++ < 2) {
            TH_LOG(Warn, "the server (", rpc->url(), ") does not know this worker; registering again");
            reregister(deadline);
            continue;
        }
        if (e->unknown_worker())
            fail(TH_ERR_UNAVAILABLE, "the server does not accept this worker: ", e->message() ? e->message()->str() : "");
        throw_reply_error(*e, "request");
    }
}

void Client::hello(const Deadline &deadline) {
    Builder b(512);
    Header h = header();
    std::vector<uint8_t> address = ucx_->address();
    auto body = CreateHello(b, worker_id_, b.CreateString(cfg_.worker_name), put_labels(b, cfg_.labels),
                            b.CreateVector(address));
    std::shared_ptr<RpcClient> rpc = this->rpc();
    Bytes reply = rpc->call(finish(b, h, body), deadline);
    const Envelope *env = verify(reply.data(), reply.size());
    if (env->body_type() == Body::ErrorReply) throw_reply_error(*env->body_as_ErrorReply(), "Hello");
    if (env->body_type() != Body::HelloReply) fail(TH_ERR_PROTOCOL, "unexpected reply to Hello");
    const HelloReply *r = env->body_as_HelloReply();
    uint64_t seen = max_epoch_.load();
    while (seen < r->server_epoch() && !max_epoch_.compare_exchange_weak(seen, r->server_epoch())) {
    }
    registrations_++;
    {
        std::lock_guard lk(hello_mu_);
        hello_address_ = std::move(address);
    }
    if (r->lease_ms() > 0) lease_ms_ = r->lease_ms();
    std::string events = r->events_url() ? r->events_url()->str() : "";
    if (!events.empty()) {
        events = reachable_events_url(rpc->url(), events);
        if (!events_ || events_->url() != events) {
            events_.reset();
            events_ = std::make_unique<Subscriber>(events, [this](const uint8_t *d, size_t n) { on_event(d, n); });
        }
    }
}

void Client::on_event(const uint8_t *data, size_t size) {
    if (faults().drop_events) return;
    try {
        const Envelope *env = verify(data, wire::open(data, size, cfg_.token));
        if (env->body_type() != Body::Event) return;
        const wire::Event *e = env->body_as_Event();
        std::lock_guard lk(ev_mu_);
        if (event_seq_ != 0 && e->seq() != event_seq_ + 1) event_gap_ = true;
        event_seq_ = e->seq();
        if (e->kind() == EventKind::Committed && e->model()) {
            uint64_t &v = latest_seen_[e->model()->str()];
            v = std::max(v, e->version());
        }
    } catch (const Error &e) {
        TH_LOG(Warn, "ignoring a malformed server event: ", e.what());
        return;
    }
    ev_cv_.notify_all();
}

// After a server restart (or after being reported unreachable) the server has
// forgotten us: introduce ourselves again and re-declare every complete replica,
// so that the server rebuilds its view from the workers, which hold the truth.
void Client::reregister(const Deadline &deadline) {
    // Holders re-declare within a heartbeat plus a call's timeout of noticing;
    // those that have not by the end of a lease are gone anyway. Set before
    // the Hello: other threads may reach the new server as soon as it is sent.
    rebuilt_by_ = Clock::now() + std::chrono::milliseconds(lease_ms_.load() + cfg_.timeout_ms);
    std::lock_guard lk(reg_mu_);
    hello(deadline);
    // Without recovery: a failure here surfaces to the call that asked for
    // re-registration, which decides whether to try the next server.
    for (auto &[id, r] : held_) {
        if (!r->complete_ || r->mutating_) continue;
        try {
            send_publish(*r, deadline, /*recover=*/false);
        } catch (const Error &e) {
            // The server moved past this version while it did not know us
            // and has forgotten it (nobody else held it): it is no longer a
            // version anyone can fetch. The others must still be declared.
            if (e.code() != TH_ERR_CONFLICT) throw;
            TH_LOG(Info, "not declaring '", r->model_, "' version ", r->version_, " shard ", r->shard_, " again: ", e.what());
        }
    }
}

bool Client::registered_address_is_current() {
    std::vector<uint8_t> now = ucx_->address();
    std::lock_guard lk(hello_mu_);
    return hello_address_ == now;
}

void Client::heartbeat_loop() {
    std::unique_lock lk(hb_mu_);
    bool warned = false, retry = false;
    while (!stop_) {
        hb_cv_.wait_for(lk, std::chrono::milliseconds(cfg_.heartbeat_ms), [this] { return stop_ || reregister_asked_; });
        if (stop_) break;
        bool again = std::exchange(reregister_asked_, false) || retry;
        lk.unlock();
        // A call that found this worker unknown after the pause may have
        // registered the new address already: a second Hello would only make
        // the server forget our replicas until they are declared again.
        if (again && !retry && registered_address_is_current()) again = false;
        if (again) {
            try {
                reregister(Deadline(cfg_.timeout_ms));
                TH_LOG(Info, "registered again with the new UCX address");
                retry = false;
            } catch (const std::exception &e) {
                TH_LOG(Warn, "registering the new UCX address failed (retried at the next heartbeat): ", e.what());
                retry = true;
            }
        }
        try {
            beat();
            if (warned) TH_LOG(Warn, "server ", cfg_.server_url, " answers heartbeats again");
            warned = false;
        } catch (const std::exception &e) {
            if (!warned) TH_LOG(Warn, "heartbeat to ", cfg_.server_url, " failed: ", e.what());
            warned = true;
        }
        lk.lock();
    }
}

// A heartbeat; its reply names the owned copies no longer required.
void Client::beat() {
    Bytes reply = call([](Builder &b, const Header &h) { return finish(b, h, CreateHeartbeat(b)); },
                       Deadline(cfg_.timeout_ms));
    const Envelope *env = GetEnvelope(reply.data());
    if (env->body_type() != Body::HeartbeatReply) return;
    const auto *d = aligned(env->body_as_HeartbeatReply()->drop(), "drop list");
    if (d != nullptr && d->size() > 0) drop_owned(std::vector<uint64_t>(d->begin(), d->end()));
}

void Client::remember(Replica *r) {
    std::lock_guard lk(reg_mu_);
    held_[r->id_] = r;
}

void Client::forget(Replica *r) {
    std::lock_guard lk(reg_mu_);
    held_.erase(r->id_);
}

// Registers the buffers (cached) and builds the replica's description.
Replica *Client::prepare_replica(std::unique_ptr<Replica> &r, std::vector<Buffer> &buffers) {
    r->client_ = this;
    r->id_ = next_replica_++ ^ (worker_id_ << 20);
    if (r->id_ == 0) r->id_ = 1;
    r->buffers_ = std::move(buffers);
    for (const Buffer &buf : r->buffers_) {
        RegionRef reg = ucx_->register_memory(buf.data, buf.spec.nbytes, buf.kind, /*expose=*/true);
        uint32_t idx = 0;
        while (idx < r->regions_.size() && r->regions_[idx] != reg) ++idx;
        if (idx == r->regions_.size()) r->regions_.push_back(reg);
        r->desc_.places.push_back({idx, reinterpret_cast<uintptr_t>(buf.data) - reg->base});
    }
    r->ctrl_ = ctrl_->acquire();
    r->regions_.push_back(ctrl_->region());
    r->desc_.ctrl_region = static_cast<uint32_t>(r->regions_.size() - 1);
    r->desc_.ctrl_offset = r->ctrl_.offset;
    r->desc_.ctrl_generation = r->ctrl_.word->generation.load();
    for (const RegionRef &reg : r->regions_)
        r->desc_.regions.push_back({reg->base, reg->length, reg->rkey, static_cast<uint8_t>(reg->kind)});
    return r.get();
}

void Client::send_publish(const Replica &r, const Deadline &deadline, bool recover) {
    std::vector<TensorSpec> specs;
    for (const Buffer &b : r.buffers_) specs.push_back(b.spec);
    Bytes reply = call_raw(
        [&](Builder &b, const Header &h) {
            auto body = CreatePublish(b, b.CreateString(r.model_), r.version_, r.shard_, r.num_shards_, r.chunk_bytes_,
                                      put_tensors(b, specs), put_desc(b, r.desc_), r.id_, r.owned_,
                                      r.checksums_.empty() ? 0 : b.CreateVector(r.checksums_));
            return finish(b, h, body);
        },
        deadline, recover);
    if (GetEnvelope(reply.data())->body_type() != Body::PublishReply) fail(TH_ERR_PROTOCOL, "unexpected reply to Publish");
}

std::unique_ptr<Replica> Client::publish(const std::string &model, uint64_t version, uint32_t shard,
                                         uint32_t num_shards, uint64_t chunk_bytes, std::vector<Buffer> buffers,
                                         SyncStats *stats, bool checksums) {
    auto started = Clock::now();
    if (model.empty() || model.size() > 255) fail(TH_ERR_INVALID_ARG, "model name must be 1..255 bytes");
    if (num_shards == 0 || shard >= num_shards)
        fail(TH_ERR_INVALID_ARG, "shard ", shard, " is out of range for ", num_shards, " shards");
    std::vector<TensorSpec> specs;
    for (const Buffer &b : buffers) {
        if (b.data == nullptr) fail(TH_ERR_INVALID_ARG, "tensor '", b.spec.name, "' has a null data pointer");
        specs.push_back(b.spec);
    }
    Layout layout(specs, chunk_bytes);  // validates names, sizes, chunk size
    auto r = std::make_unique<Replica>();
    r->model_ = model;
    r->version_ = version;
    r->shard_ = shard;
    r->num_shards_ = num_shards;
    r->chunk_bytes_ = chunk_bytes;
    prepare_replica(r, buffers);
    if (checksums) {
        std::vector<std::vector<ChunkPiece>> chunks(layout.num_chunks());
        for (uint32_t c = 0; c < layout.num_chunks(); ++c)
            for (const Segment &s : layout.segments(layout.chunk_begin(c), layout.chunk_end(c))) {
                const Buffer &b = r->buffers_[s.tensor];
                chunks[c].push_back({static_cast<const uint8_t *>(b.data) + s.offset, s.length, b.kind});
            }
        for (const auto &pieces : chunks) r->checksums_.push_back(checksum(pieces));
    }
    r->ctrl_.word->chunks_done.store(layout.num_chunks());
    r->complete_ = true;
    try {
        send_publish(*r, Deadline(cfg_.timeout_ms));
    } catch (...) {
        ctrl_->release(r->ctrl_.word);
        throw;
    }
    remember(r.get());
    // Memory for the owned copy a mutation of it may need, made ready now,
    // on the pool's thread, rather than when the trainer waits for it.
    if (cfg_.retention != TH_RETAIN_FAIL) spill_pool_->prepare(layout.total_bytes());
    SyncStats st;
    st.version = version;
    st.moved = false;
    st.bytes = layout.total_bytes();
    st.chunks = layout.num_chunks();
    st.seconds = std::chrono::duration<double>(Clock::now() - started).count();
    TH_LOG(Info, "published '", model, "' v", version, " shard ", shard, "/", num_shards, ": ", st.bytes, " bytes, ",
           st.chunks, " chunks in ", st.seconds, " s");
    if (stats) *stats = st;
    return r;
}

void Client::release(Replica &r, bool retain) {
    std::optional<Error> retention_failed;
    if (retain && !r.mutating_ && r.complete_) {
        try {
            prepare_to_give_up(r, Deadline(cfg_.timeout_ms));
        } catch (const Error &e) {
            if (e.code() == TH_ERR_RETAINED) throw;  // refused: nothing changed, still served
            // Not listed by the server (it refused the version when this
            // worker registered again, or lost this worker's lease): no
            // reader is routed here and nothing requires it from us.
            // Otherwise the server could not be asked (it is gone or slow):
            // the caller gives the buffers up all the same, so withdraw
            // locally, and report.
            if (e.code() != TH_ERR_NOT_FOUND) retention_failed = e;
        }
    }
    forget(&r);
    ctrl_->release(r.ctrl_.word);  // readers still on it see the generation change
    // A deadline of its own: a spill before it may have taken any time.
    try {
        call([&](Builder &b, const Header &h) { return finish(b, h, CreateRelease(b, r.id_)); },
             Deadline(cfg_.timeout_ms));
    } catch (const Error &e) {
        // The server had forgotten it already (it lost this worker's lease,
        // or refused the replica when this worker registered again): what
        // release asks for is done.
        if (e.code() != TH_ERR_NOT_FOUND) throw;
        TH_LOG(Info, "replica ", r.id_, " was no longer listed by the server: ", e.what());
    }
    if (retention_failed) throw *retention_failed;
}

uint32_t Client::prepare_to_give_up(Replica &r, const Deadline &deadline) {
    Deadline calls = deadline;
    auto ask = [&](Body kind) {
        Bytes reply = call(
            [&](Builder &b, const Header &h) {
                return kind == Body::BeginMutation ? finish(b, h, CreateBeginMutation(b, r.id_))
                                                   : finish(b, h, CreateCancelMutation(b, r.id_));
            },
            calls);
        return reply;
    };
    Bytes reply = ask(Body::BeginMutation);
    auto state = [&] { return GetEnvelope(reply.data())->body_as_BeginMutationReply(); };
    if (state() == nullptr) fail(TH_ERR_PROTOCOL, "unexpected reply to BeginMutation");
    if (state()->last_copy()) {
        std::string what = str("replica of model '", r.model_, "' version ", r.version_, " shard ", r.shard_,
                               " is the last complete copy of a required version");
        if (cfg_.retention == TH_RETAIN_FAIL) {
            ask(Body::CancelMutation);
            fail(TH_ERR_RETAINED, what, " (retention policy: fail)");
        }
        // wait: give a filling replica the chance to complete first.
        Deadline wait = deadline.capped(cfg_.mutation_wait_ms);
        while (cfg_.retention == TH_RETAIN_WAIT && state()->last_copy() && state()->filling() > 0 && !wait.expired()) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
            reply = ask(Body::BeginMutation);
        }
        if (state()->last_copy()) {
            TH_LOG(Info, what, ": keeping an owned copy");
            // The server kept routing readers here while the copy was made;
            // asking again finds the copy and stops that.
            try {
                spill(r);
            } catch (...) {
                // Nothing changed: it keeps serving. The spill's error is
                // what the caller needs to hear, not this call's.
                calls = Deadline(cfg_.timeout_ms);
                try {
                    ask(Body::CancelMutation);
                } catch (const std::exception &e) {
                    TH_LOG(Warn, "replica ", r.id_, " may stay unrouted: ", e.what());
                }
                throw;
            }
            // The copy is local work as long as the shard is large (seconds
            // for GBs); the server is owed an answer within a deadline of its own.
            calls = Deadline(cfg_.timeout_ms);
            reply = ask(Body::BeginMutation);
            if (state() == nullptr) fail(TH_ERR_PROTOCOL, "unexpected reply to BeginMutation");
        }
    }
    return state()->active_reads();
}

void Client::begin_mutation(Replica &r) {
    if (r.mutating_) fail(TH_ERR_INVALID_ARG, "begin_mutation was already called on this replica");
    uint32_t active = prepare_to_give_up(r, Deadline(cfg_.timeout_ms + cfg_.mutation_wait_ms));
    // Let the reads already planned onto it finish; past the wait the seqlock
    // still protects them (they re-read elsewhere). The wait starts now: a
    // spill before it may have taken any time.
    Deadline drain(cfg_.mutation_wait_ms);
    Deadline deadline(cfg_.timeout_ms + cfg_.mutation_wait_ms);
    while (active > 0 && !drain.expired()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        Bytes reply = call([&](Builder &b, const Header &h) { return finish(b, h, CreateBeginMutation(b, r.id_)); },
                           deadline);
        active = GetEnvelope(reply.data())->body_as_BeginMutationReply()->active_reads();
    }
    if (active > 0) TH_LOG(Info, "replica ", r.id_, ": ", active, " reads still in flight after ", cfg_.mutation_wait_ms,
                          " ms; they will re-read elsewhere");
    r.ctrl_.word->generation.fetch_add(1);  // odd: changing
    r.mutating_ = true;
}

void Client::spill(const Replica &r) {
    uint64_t total = 0;
    for (const Buffer &b : r.buffers_) total += b.spec.nbytes;
    auto copy = std::make_unique<Replica>();
    copy->model_ = r.model_;
    copy->version_ = r.version_;
    copy->shard_ = r.shard_;
    copy->num_shards_ = r.num_shards_;
    copy->chunk_bytes_ = r.chunk_bytes_;
    copy->owned_ = true;
    copy->checksums_ = r.checksums_;
    // Copies of versions no longer required give their memory back first:
    // the previous version's copy is usually what this one reuses.
    bool have_owned;
    {
        std::lock_guard lk(reg_mu_);
        have_owned = !owned_.empty();
    }
    if (have_owned) {
        try {
            beat();
        } catch (const Error &e) {
            TH_LOG(Info, "could not ask which owned copies may go before spilling: ", e.what());
        }
    }
    copy->storage_ = spill_pool_->acquire(total);
    std::vector<Buffer> buffers;
    uint64_t offset = 0;
    for (const Buffer &b : r.buffers_) {
        Buffer nb = b;
        nb.data = copy->storage_.data() + offset;
        nb.kind = TH_MEM_HOST;
        copy_to_host(nb.data, b.data, b.spec.nbytes, b.kind);
        offset += b.spec.nbytes;
        buffers.push_back(nb);
    }
    if (faults().spill_delay_us) std::this_thread::sleep_for(std::chrono::microseconds(faults().spill_delay_us));
    prepare_replica(copy, buffers);
    copy->ctrl_.word->chunks_done.store(Layout([&] {
        std::vector<TensorSpec> specs;
        for (const Buffer &b : copy->buffers_) specs.push_back(b.spec);
        return specs;
    }(), copy->chunk_bytes_).num_chunks());
    copy->complete_ = true;
    send_publish(*copy, Deadline(cfg_.timeout_ms));
    remember(copy.get());
    std::lock_guard lk(reg_mu_);
    owned_[copy->id_] = std::move(copy);
}

void Client::drop_owned(const std::vector<uint64_t> &ids) {
    for (uint64_t id : ids) {
        std::unique_ptr<Replica> r;
        {
            std::lock_guard lk(reg_mu_);
            auto it = owned_.find(id);
            if (it == owned_.end()) continue;
            r = std::move(it->second);
            owned_.erase(it);
        }
        // Freed only once the server routes nobody to it and nobody reads it:
        // a reader planned onto it since the heartbeat may still be reading.
        bool keep = true;
        try {
            Deadline d(cfg_.timeout_ms);
            Bytes reply = call([&](Builder &b, const Header &h) { return finish(b, h, CreateBeginMutation(b, r->id_)); }, d);
            const BeginMutationReply *state = GetEnvelope(reply.data())->body_as_BeginMutationReply();
            keep = state == nullptr || state->active_reads() > 0 || state->last_copy();
            if (keep) call([&](Builder &b, const Header &h) { return finish(b, h, CreateCancelMutation(b, r->id_)); }, d);
        } catch (const std::exception &e) {
            TH_LOG(Info, "keeping the owned copy ", id, " for now: ", e.what());
        }
        if (keep) {
            std::lock_guard lk(reg_mu_);
            owned_[id] = std::move(r);  // asked again at a later heartbeat
            continue;
        }
        TH_LOG(Info, "freeing the owned copy of '", r->model_, "' version ", r->version_, " shard ", r->shard_,
               ": no longer required");
        r->mutating_ = true;
        try {
            release(*r, /*retain=*/false);  // withdrawn locally even if the server is not told
        } catch (const std::exception &e) {
            TH_LOG(Warn, "releasing an owned copy: ", e.what());
        }
        r.reset();  // its memory goes back to the spill pool
    }
}

void Client::set_pinned(const std::string &model, uint64_t version, bool pinned) {
    if (model.empty()) fail(TH_ERR_INVALID_ARG, "model name is empty");
    call([&](Builder &b, const Header &h) { return finish(b, h, CreatePin(b, b.CreateString(model), version, pinned)); },
         Deadline(cfg_.timeout_ms));
}

uint64_t Client::wait_for_version(const std::string &model, uint64_t newer_than, uint32_t timeout_ms) {
    if (model.empty()) fail(TH_ERR_INVALID_ARG, "model name is empty");
    Deadline deadline(timeout_ms);
    // Events say when to look; the query is the truth. A catch-up query also
    // runs after a gap in the event sequence, and at least once a second in
    // case events are lost entirely.
    constexpr uint32_t kCatchUpMs = 1000;
    for (;;) {
        try {
            uint64_t v = resolve(model, UINT64_MAX);
            if (v > newer_than) return v;
        } catch (const Error &e) {
            if (e.code() != TH_ERR_NOT_FOUND) throw;
        }
        std::unique_lock lk(ev_mu_);
        event_gap_ = false;
        Deadline slice = deadline.capped(kCatchUpMs);
        ev_cv_.wait_until(lk, slice.at(), [&] {
            auto it = latest_seen_.find(model);
            return event_gap_ || (it != latest_seen_.end() && it->second > newer_than);
        });
        if (deadline.expired())
            fail(TH_ERR_TIMEOUT, "no version of model '", model, "' newer than ", newer_than, " was committed within ",
                 timeout_ms, " ms");
    }
}

std::string Client::describe_json(const std::string &model, uint64_t version, uint32_t shard) {
    if (model.empty()) fail(TH_ERR_INVALID_ARG, "model name is empty");
    Bytes reply = call(
        [&](Builder &b, const Header &h) { return finish(b, h, CreateDescribe(b, b.CreateString(model), version, shard)); },
        Deadline(cfg_.timeout_ms));
    const Envelope *env = GetEnvelope(reply.data());
    if (env->body_type() != Body::DescribeReply) fail(TH_ERR_PROTOCOL, "unexpected reply to Describe");
    const DescribeReply *d = env->body_as_DescribeReply();
    return describe_to_json(model, shard, *d);
}

uint64_t Client::resolve(const std::string &model, uint64_t version) {
    if (model.empty()) fail(TH_ERR_INVALID_ARG, "model name is empty");
    Bytes reply = call(
        [&](Builder &b, const Header &h) { return finish(b, h, CreateResolve(b, b.CreateString(model), version)); },
        Deadline(cfg_.timeout_ms));
    const Envelope *env = GetEnvelope(reply.data());
    if (env->body_type() != Body::ResolveReply) fail(TH_ERR_PROTOCOL, "unexpected reply to Resolve");
    return env->body_as_ResolveReply()->version();
}

std::string Client::status_json() {
    Bytes reply = call([](Builder &b, const Header &h) { return finish(b, h, CreateStatusQuery(b)); },
                       Deadline(cfg_.timeout_ms));
    const Envelope *env = GetEnvelope(reply.data());
    if (env->body_type() != Body::StatusReply) fail(TH_ERR_PROTOCOL, "unexpected reply to StatusQuery");
    return status_to_json(*env->body_as_StatusReply());
}

}  // namespace th

#include "client/fetch.hpp"

namespace th {

Client *replica_client(const Replica &r) { return r.client_; }

std::string query_status(const std::string &url, uint32_t timeout_ms, const std::string &token) {
    // The server's HTTP endpoint serves the same document to its live page.
    if (url.rfind("http://", 0) == 0) {
        std::string base = url;
        while (!base.empty() && base.back() == '/') base.pop_back();
        return http_get(base + "/api/status", timeout_ms);
    }
    RpcClient rpc(url, token);
    Builder b(64);
    Header h;
    h.request_id = 1;
    Bytes reply = rpc.call(wire::finish(b, h, CreateStatusQuery(b)), Deadline(timeout_ms));
    const Envelope *env = verify(reply.data(), reply.size());
    if (env->body_type() == Body::ErrorReply) throw_reply_error(*env->body_as_ErrorReply(), "status query");
    if (env->body_type() != Body::StatusReply) fail(TH_ERR_PROTOCOL, "unexpected reply to StatusQuery");
    return status_to_json(*env->body_as_StatusReply());
}

FetchResult Client::fetch(const FetchRequest &req, std::vector<Buffer> dst, bool serve) {
    Fetch f(*this, req, std::move(dst), serve);
    FetchResult r = f.run();
    TH_LOG(Info, "fetched '", req.model, "' ", r.stats.fetch_summary(req.shard));
    return r;
}

}  // namespace th
