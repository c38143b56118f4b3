#include "server/service.hpp"

#include <algorithm>
#include <random>
#include <thread>

#include "common/error.hpp"
#include "common/faults.hpp"
#include "common/log.hpp"
#include "common/stripes.hpp"
#include "common/trace.hpp"
#include "server/status_report.hpp"
#include "wire/status_json.hpp"

namespace th {

using namespace wire;

namespace {

constexpr size_t kReplyCacheSize = 4096;
constexpr size_t kMaxModelName = 255;
constexpr uint32_t kMaxShards = 65536;

uint64_t new_epoch(bool standby) {
    uint64_t low = std::random_device{}() & 0xfffu;
    // A standby starts below every active server, so that a new client, which
    // starts on the answering server of the newest epoch, never picks a
    // standby over the server in use (a standby restarted after a failover
    // would otherwise outrank the server that took over). It takes over above
    // the epoch of the first worker that fails over to it.
    if (standby) return low + 1;
    // Later servers get larger epochs (milliseconds since the Unix epoch in the
    // high bits), so a stale server can be told apart from its successor.
    uint64_t ms = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count());
    return (ms << 12) | low;
}

// Requests whose replies are kept for a re-send: applying them twice would
// change the state twice.
bool mutating(Body type) {
    return type == Body::Publish || type == Body::FetchDone || type == Body::Release || type == Body::PlanFetch ||
           type == Body::Pin;
}

// Every request that names a model checks it here, and only here.
std::string model_name(const flatbuffers::String *s) {
    std::string name = required(s, "model name");
    if (name.size() > kMaxModelName) fail(TH_ERR_INVALID_ARG, "model name longer than ", kMaxModelName, " bytes");
    return name;
}

}  // namespace

Service::Service(ServiceConfig cfg)
    : cfg_(cfg),
      epoch_(new_epoch(cfg.standby)),
      lead_until_ms_(cfg.await_leadership ? 0 : UINT64_MAX),
      start_ms_(clock_ms()),
      catalog_(empty_catalog()),
      planner_(cfg.policy),
      reachability_(cfg.heartbeat_ms, cfg.lease_ms),
      replies_(kReplyCacheSize) {
    if (cfg_.ping_server && !cfg_.await_leadership)
        probe_ = std::make_unique<TakeoverProbe>(cfg_.ping_server, [this] { return clock_ms(); });
}

Bytes Service::handle(const uint8_t *data, size_t size) {
    Header h;
    Body type = Body::NONE;
    try {
        const Envelope *env = verify(data, size);
        type = env->body_type();
        h.request_id = env->request_id();
        h.worker_id = env->worker_id();
        trace::event("request", h.worker_id, h.request_id, static_cast<uint64_t>(type));
        if (type == Body::Hello && faults().hello_delay_us)
            std::this_thread::sleep_for(std::chrono::microseconds(faults().hello_delay_us));
        if (type == Body::Heartbeat && faults().heartbeat_delay_us)
            std::this_thread::sleep_for(std::chrono::microseconds(faults().heartbeat_delay_us));
        if (type == Body::PlanFetch && faults().plan_answer_delay_us)
            std::this_thread::sleep_for(std::chrono::microseconds(faults().plan_answer_delay_us));
        if (type == Body::Resolve && faults().resolve_answer_delay_us)
            std::this_thread::sleep_for(std::chrono::microseconds(faults().resolve_answer_delay_us));
        if (type == Body::Hello)
            if (std::optional<Bytes> refused = keep_live_leader(*env, h)) return *refused;
        std::lock_guard lk(mu_);
        if (!leading()) {
            h.epoch = epoch_;
            return error_reply(h, TH_ERR_UNAVAILABLE, "this server is not the leader (etcd names the leader)",
                               {.not_leader = true});
        }
        if (std::optional<Bytes> stale = fence(*env, h)) return *stale;
        if (h.worker_id != 0)
            if (const Bytes *again = replies_.find(h)) return *again;
        if (std::optional<std::string> why = unknown_sender(*env, h))
            return error_reply(h, TH_ERR_UNAVAILABLE, *why, {.unknown_worker = true});
        Bytes reply = dispatch(*env, h);
        if (mutating(env->body_type()) && h.worker_id != 0) replies_.remember(h, reply);
        return reply;
    } catch (const Error &e) {
        return refuse(h, e, type);
    } catch (const std::exception &e) {
        h.epoch = epoch_;
        TH_LOG(Error, "request failed: ", e.what());
        return error_reply(h, TH_ERR_INTERNAL, str("server error: ", e.what()));
    }
}

Catalog Service::empty_catalog() {
    return Catalog(cfg_.policy, [this](EventKind kind, const std::string &model, uint64_t version, uint64_t replica) {
        emit(kind, model, version, replica);
    });
}

void Service::lead(uint64_t epoch, uint64_t until_ms, bool after_another) {
    std::lock_guard lk(mu_);
    catalog_ = empty_catalog();
    early_reports_.clear();
    replies_ = ReplyCache(kReplyCacheSize);
    epoch_ = epoch;
    took_over_ms_ = after_another ? std::max<uint64_t>(clock_ms(), 1) : 0;
    lead_until_ms_ = until_ms;
}

// Epochs fence a stale server. A worker that says Hello with an epoch above
// ours has been served by a newer server that is gone: we take over above it.
// (Our own epoch is a worker registering again, after a pause say: no
// takeover, so no "rebuilding" answers either.) Any other request from a
// worker that knows a newer epoch means we are the stale one.
std::optional<Bytes> Service::fence(const Envelope &env, Header &h) {
    if (env.epoch() > epoch_ && env.body_type() == Body::Hello) {
        TH_LOG(Warn, "taking over from a server of epoch ", env.epoch(), " (was ", epoch_.load(), ")");
        epoch_ = env.epoch() + 1;
        took_over_ms_ = clock_ms();
        early_reports_.clear();  // kept during an earlier takeover
    }
    h.epoch = epoch_;
    if (env.epoch() <= epoch_) return std::nullopt;
    return error_reply(h, TH_ERR_UNAVAILABLE,
                       str("this server is stale (epoch ", epoch_.load(), "; the worker has seen epoch ", env.epoch(), ")"),
                       {.stale_server = true});
}

std::optional<Bytes> Service::keep_live_leader(const Envelope &env, Header h) {
    const Hello *m = env.body_as_Hello();
    if (!probe_ || env.epoch() <= epoch_ || m->left_url() == nullptr || m->left_url()->size() == 0)
        return std::nullopt;
    std::string left = m->left_url()->str();
    TakeoverProbe::Answer a = probe_->ask(left, m->probe_ms());
    h.epoch = epoch_;
    using State = TakeoverProbe::Answer::State;
    if (a.state == State::Probing)
        return error_reply(h, TH_ERR_UNAVAILABLE,
                           str("asking the server at ", left, " whether it still answers; say Hello again"),
                           {.probing = true});
    if (a.state == State::Gone) {
        TH_LOG(Info, "worker ", h.worker_id, " left ", left, ", which does not answer either (", a.why, ")");
        return std::nullopt;
    }
    if (a.epoch < env.epoch()) return std::nullopt;  // a server restarted there, behind the one the worker left
    TH_LOG(Warn, "not taking over: worker ", h.worker_id, " left ", left, ", which still answers (epoch ", a.epoch,
           ")");
    return error_reply(h, TH_ERR_UNAVAILABLE,
                       str("the server at ", left, " still answers (epoch ", a.epoch,
                           "): this server does not take over from a live one"),
                       {.left_server_alive = true});
}

// Every request but Ping, Hello and a status query comes from a registered
// worker. One that is not (this server restarted, or a reader reported the
// worker unreachable) is told so by the reply's unknown_worker flag, and says
// Hello again. The reply's code is TH_ERR_UNAVAILABLE, what a client that
// cannot register again reports to its caller.
std::optional<std::string> Service::unknown_sender(const Envelope &env, const Header &h) {
    Body type = env.body_type();
    if (type == Body::Ping || type == Body::Hello || type == Body::StatusQuery) return std::nullopt;
    WorkerInfo *w = h.worker_id != 0 ? catalog_.find_worker(h.worker_id) : nullptr;
    if (w == nullptr) return str("worker ", h.worker_id, " is not registered with this server (epoch ", epoch_.load(), ")");
    if (w->suspect) return str("worker ", h.worker_id, " was reported unreachable; it must register again");
    w->last_seen_ms = clock_ms();
    return std::nullopt;
}

// Just after a takeover, or on a standby before its first one: what we do not
// know may only not be re-declared yet.
bool Service::rebuilding() const {
    uint64_t took_over = took_over_ms_;
    return took_over == 0 ? cfg_.standby : clock_ms() < took_over + cfg_.lease_ms;
}

Bytes Service::refuse(Header h, const Error &e, Body type) {
    h.epoch = epoch_;
    if (e.code() == TH_ERR_PROTOCOL) {
        metrics_.bad_requests++;
        TH_LOG(Warn, "bad request from worker ", h.worker_id, ": ", e.what());
    }
    // Just after a takeover, or on a standby before its first one,
    // "unknown" may only mean "not re-declared yet". Not for a holder asking
    // about its own replica: it has re-declared all it will.
    bool missing = e.code() == TH_ERR_NOT_FOUND || e.code() == TH_ERR_NOT_COMMITTED || e.code() == TH_ERR_UNAVAILABLE;
    bool own = type == Body::Release || type == Body::BeginMutation || type == Body::CancelMutation;
    bool maybe_not_yet = missing && !own && rebuilding();
    // The client asks again while its call's time lasts: the answer it ends
    // with says why it may be wrong.
    std::string why = e.what();
    if (maybe_not_yet) {
        uint64_t took_over = took_over_ms_;
        why += took_over == 0
                   ? std::string("; this server is a standby that has not taken over (it does when workers fail over "
                                 "to it), and their replicas may not have been declared to it")
                   : str("; this server took over ", clock_ms() - took_over,
                         " ms ago and its workers may not have declared it yet");
    }
    return error_reply(h, e.code(), why,
                       {.rebuilding = maybe_not_yet, .no_source_yet = dynamic_cast<const NoSourceYet *>(&e) != nullptr});
}

Bytes Service::dispatch(const Envelope &env, const Header &h) {
    switch (env.body_type()) {
        case Body::Ping: {
            Builder b(64);
            return finish(b, h, CreatePong(b, epoch_));
        }
        case Body::Hello: return on_hello(env, h);
        case Body::Heartbeat: return on_heartbeat(h);
        case Body::BeginMutation: return on_begin_mutation(env, h);
        case Body::CancelMutation: return on_cancel_mutation(env, h);
        case Body::Pin: return on_pin(env, h);
        case Body::Describe: return on_describe(env, h);
        case Body::Publish: return on_publish(env, h);
        case Body::Resolve: return on_resolve(env, h);
        case Body::PlanFetch: return on_plan(env, h);
        case Body::Progress: return on_progress(env, h);
        case Body::FetchDone: return on_fetch_done(env, h);
        case Body::SourceFailed: return on_source_failed(env, h);
        case Body::ChunksChecked: return on_chunks_checked(env, h);
        case Body::Release: return on_release(env, h);
        case Body::StatusQuery: return on_status(h);
        case Body::Goodbye: return on_goodbye(h);
        default: fail(TH_ERR_PROTOCOL, "unexpected message type ", static_cast<int>(env.body_type()));
    }
}

Bytes Service::ack(const Header &h) {
    Builder b(64);
    return finish(b, h, CreateAck(b));
}

Bytes Service::on_hello(const Envelope &env, const Header &h) {
    const Hello *m = env.body_as_Hello();
    if (m->worker_id() == 0 || m->worker_id() != h.worker_id) fail(TH_ERR_PROTOCOL, "Hello with a bad worker id");
    if (m->ucx_address() == nullptr || m->ucx_address()->size() == 0) fail(TH_ERR_PROTOCOL, "Hello without UCX address");
    WorkerInfo w;
    w.id = m->worker_id();
    w.name = m->name() ? m->name()->str() : "";
    w.labels = get_labels(m->labels());
    w.place = neighbourhood(w.labels);
    w.ucx_address.assign(m->ucx_address()->begin(), m->ucx_address()->end());
    w.last_seen_ms = clock_ms();
    TH_LOG(Info, "worker ", w.id, " '", w.name, "' registered (", format_labels(w.labels), ")");
    // A worker registering again replaces its old state.
    bool again = catalog_.register_worker(std::move(w));
    (again ? metrics_.registered_again : metrics_.registered_new)++;
    Builder b(256);
    std::vector<flatbuffers::Offset<PeerAddress>> ahead;
    for (const WorkerInfo *p : connect_ahead(*catalog_.find_worker(h.worker_id), /*offer=*/!again))
        ahead.push_back(CreatePeerAddress(b, p->id, b.CreateVector(p->ucx_address)));
    return finish(b, h, CreateHelloReply(b, epoch_, cfg_.lease_ms, cfg_.heartbeat_ms, b.CreateString(cfg_.events_url),
                                         b.CreateVector(ahead)));
}

std::vector<const WorkerInfo *> Service::connect_ahead(const WorkerInfo &w, bool offer) {
    constexpr size_t kRecent = 16;
    std::vector<const WorkerInfo *> out;
    if (offer) {
        auto usable = [&](uint64_t id) {
            const WorkerInfo *r = id == w.id ? nullptr : catalog_.find_worker(id);
            return r != nullptr && !r->suspect ? r : nullptr;
        };
        for (auto &[id, offered] : recent_publishers_) {
            const WorkerInfo *p = usable(id);
            if (p == nullptr || offered >= kPublisherFanIn) continue;
            offered++;
            out.push_back(p);
        }
        std::vector<const WorkerInfo *> elsewhere;
        for (uint64_t id : recent_workers_) {
            const WorkerInfo *r = usable(id);
            if (r == nullptr || std::find(out.begin(), out.end(), r) != out.end()) continue;
            (r->place.host == w.place.host ? out : elsewhere).push_back(r);
        }
        out.insert(out.end(), elsewhere.begin(), elsewhere.end());
        if (out.size() > kConnectAhead) out.resize(kConnectAhead);
    }
    std::erase(recent_workers_, w.id);
    recent_workers_.push_front(w.id);
    if (recent_workers_.size() > kRecent) recent_workers_.pop_back();
    return out;
}

Bytes Service::on_goodbye(const Header &h) {
    TH_LOG(Info, "worker ", h.worker_id, " '", catalog_.find_worker(h.worker_id)->name, "' said goodbye");
    catalog_.remove_worker(h.worker_id);
    return ack(h);
}

Bytes Service::on_heartbeat(const Header &h) {
    // Owned copies whose version nobody needs any more can be freed (not
    // while rebuilding: readers have not told us yet what they read).
    // Replicas readers reported are checked by their holder.
    Builder b(64);
    std::vector<flatbuffers::Offset<ChunkCheck>> check;
    for (const auto &[id, chunks] : catalog_.reported_chunks(h.worker_id))
        check.push_back(CreateChunkCheck(b, id, b.CreateVector(chunks)));
    auto drop = b.CreateVector(catalog_.unneeded_owned_copies(h.worker_id, rebuilding()));
    return finish(b, h, CreateHeartbeatReply(b, drop, check.empty() ? 0 : b.CreateVector(check)));
}

Bytes Service::on_publish(const Envelope &env, const Header &h) {
    const Publish *m = env.body_as_Publish();
    Publication p;
    p.key = {model_name(m->model()), m->version(), m->shard()};
    if (m->num_shards() == 0 || m->shard() >= m->num_shards())
        fail(TH_ERR_INVALID_ARG, "shard ", m->shard(), " is out of range for ", m->num_shards(), " shards");
    if (m->num_shards() > kMaxShards) fail(TH_ERR_INVALID_ARG, "num_shards ", m->num_shards(), " is too large");
    if (m->replica_id() == 0) fail(TH_ERR_PROTOCOL, "publish without replica id");
    p.num_shards = m->num_shards();
    p.layout = Layout(get_tensors(m->tensors()), m->chunk_bytes());  // validates
    p.desc = get_desc(m->replica());
    check_desc(p.desc, p.layout.tensors());
    p.replica_id = m->replica_id();
    p.owned = m->owned();
    p.again = m->again() && rebuilding();
    p.committed = p.again && m->committed();
    if (const auto *sums = aligned(m->checksums(), "checksum list"); sums && sums->size() > 0) {
        if (sums->size() != p.layout.num_chunks())
            fail(TH_ERR_PROTOCOL, "publish with ", sums->size(), " checksums for ", p.layout.num_chunks(), " chunks");
        p.checksums.assign(sums->begin(), sums->end());
    }
    bool own = !p.owned && !m->again();  // a version of its own, not a copy or a re-declaration
    bool again = p.again;
    bool committed = catalog_.publish(h.worker_id, std::move(p));
    if (again) apply_early_report(h.worker_id, m->replica_id());
    if (own) {
        // Newest first; a publisher keeps its count when it publishes again.
        auto it = std::find_if(recent_publishers_.begin(), recent_publishers_.end(),
                               [&](const auto &e) { return e.first == h.worker_id; });
        if (it != recent_publishers_.end()) {
            std::rotate(recent_publishers_.begin(), it, it + 1);
        } else {
            recent_publishers_.push_front({h.worker_id, 0});
            if (recent_publishers_.size() > kPublishersAhead) recent_publishers_.pop_back();
        }
    }
    Builder b(64);
    return finish(b, h, CreatePublishReply(b, committed));
}

Bytes Service::on_resolve(const Envelope &env, const Header &h) {
    const Resolve *m = env.body_as_Resolve();
    VersionInfo &v = catalog_.committed_version(model_name(m->model()), m->version());
    Builder b(64);
    return finish(b, h, CreateResolveReply(b, v.number, v.num_shards));
}

Bytes Service::on_plan(const Envelope &env, const Header &h) {
    auto started = Clock::now();
    trace::event("on_plan", h.worker_id);
    const PlanFetch *m = env.body_as_PlanFetch();
    std::string name = model_name(m->model());
    VersionInfo &v = catalog_.committed_version(name, m->version());
    ShardInfo &s = Catalog::shard(v, name, m->shard());
    uint32_t first = m->first_chunk();
    uint32_t count = m->num_chunks() == 0 ? s.num_chunks - std::min(first, s.num_chunks) : m->num_chunks();
    if (first >= s.num_chunks || count > s.num_chunks - first)
        fail(TH_ERR_INVALID_ARG, "chunks [", first, ", ", uint64_t(first) + count, ") are outside the shard's ",
             s.num_chunks, " chunks");
    if (m->tensors() != nullptr) {
        std::string diff = describe_mismatch(s.tensors, get_tensors(m->tensors()));
        if (!diff.empty())
            fail(TH_ERR_LAYOUT_MISMATCH, "buffers do not match shard ", m->shard(), " of version ", v.number, " of '", name,
                 "': ", diff);
    }
    ReplicaKey key{name, v.number, m->shard()};
    settle_reports(clock_ms());
    WorkerInfo &reader = *catalog_.find_worker(h.worker_id);
    Request req;
    req.labels = &reader.labels;
    req.reader_worker = h.worker_id;
    if (const auto *ex = aligned(m->exclude(), "exclude list")) req.exclude.assign(ex->begin(), ex->end());
    if (const auto *ex = aligned(m->exclude_replicas(), "exclude list")) req.exclude_replicas.assign(ex->begin(), ex->end());
    // Sources this reader could not read from lately are left out too: with
    // nothing else left it is told so, and waits for another holder.
    for (uint64_t id : reachability_.avoided(reader, catalog_, clock_ms()))
        if (std::find(req.exclude.begin(), req.exclude.end(), id) == req.exclude.end()) req.exclude.push_back(id);
    // A reader that will serve becomes a filling replica now, so later readers
    // can follow it.
    ReplicaInfo *mine = nullptr;
    if (m->replica_id() != 0) {
        mine = catalog_.find_replica(m->replica_id(), h.worker_id);
        if (mine == nullptr) {
            ReplicaDesc desc = get_desc(m->replica());
            check_desc(desc, s.tensors);
            mine = &catalog_.add_filling(h.worker_id, key, m->replica_id(), std::move(desc));
        } else if (mine->shard != &s) {
            fail(TH_ERR_PROTOCOL, "replica ", m->replica_id(), " holds another shard");
        }
        req.reader_seq = mine->seq;
    }
    // A reader that serves and reads several ranges at once is planned per
    // stripe; its earlier sources keep counting unless it gave them up.
    uint32_t stripes = s.stripes;
    bool striped = mine != nullptr && m->mode() != PlanMode::Single && stripes > 1;
    // Nobody follows the reader's replica until a plan finds it a source:
    // when none does, its reader waits for another holder.
    if (mine != nullptr) {
        mine->sourceless = true;
        mine->stalled_at = ReplicaInfo::kMoving;  // its reader reads on
    }
    std::vector<Assignment> plan;
    if (striped) {
        if (mine->home < 0) catalog_.set_relay(*mine, s.next_home++ % stripes, kNoDepth);
        catalog_.drop_reads(h.worker_id, key, req.exclude, req.exclude_replicas);
        uint32_t depth = mine->depth;
        plan = planner_.plan_stripes(req, reader, s, key, *mine, first, count, m->mode() == PlanMode::Striped, &depth);
        if (depth != mine->depth) catalog_.set_relay(*mine, static_cast<uint32_t>(mine->home), depth);
        for (const Assignment &a : plan) {
            catalog_.add_read(h.worker_id, key, *a.source);
            auto [lo, hi] = stripes_touching(s.num_chunks, stripes, a.first, a.first + a.count);
            for (uint32_t i = lo; i < hi; ++i) mine->hops[i] = hops_through(*a.source, i);
        }
    } else {
        ReplicaInfo &src = planner_.choose(req, reader, s, key);
        catalog_.start_read(h.worker_id, key, src);
        plan.push_back({&src, first, count});
    }
    if (mine != nullptr) mine->sourceless = false;

    Builder b(1024);
    std::vector<flatbuffers::Offset<SourceRange>> ranges;
    for (const Assignment &a : plan) {
        const ReplicaInfo &src = *a.source;
        ranges.push_back(CreateSourceRange(b, src.worker, b.CreateVector(src.holder->ucx_address), put_desc(b, src.desc),
                                           src.complete, a.first, a.count, src.id, src.publisher));
    }
    flatbuffers::Offset<flatbuffers::Vector<uint64_t>> sums;
    if (!s.checksums.empty()) sums = b.CreateVector(s.checksums.data() + first, count);
    auto reply = CreatePlanReply(b, v.number, v.chunk_bytes, s.total_bytes, put_tensors(b, s.tensors), b.CreateVector(ranges),
                                 v.num_shards, sums, striped ? stripes : 1);
    Bytes out = finish(b, h, reply);
    metrics_.plan_seconds.observe(std::chrono::duration<double>(Clock::now() - started).count());
    trace::event("on_plan_end", h.worker_id);
    return out;
}

Bytes Service::on_progress(const Envelope &env, const Header &h) {
    const Progress *m = env.body_as_Progress();
    if (ReplicaInfo *r = catalog_.find_replica(m->replica_id(), h.worker_id); r != nullptr && !r->complete) {
        r->chunks_done = std::max(r->chunks_done, m->chunks_done());
        if (r->chunks_done > r->stalled_at) r->stalled_at = ReplicaInfo::kMoving;  // it moved
    }
    return ack(h);
}

Bytes Service::on_fetch_done(const Envelope &env, const Header &h) {
    const FetchDone *m = env.body_as_FetchDone();
    ReplicaKey key{model_name(m->model()), m->version(), m->shard()};
    std::vector<SourceRead> from;
    if (m->bytes_from())
        for (const auto *sb : *m->bytes_from()) from.push_back({sb->worker_id(), sb->replica_id(), sb->bytes()});
    for (const auto &[kind, bytes] : catalog_.finish_read(h.worker_id, key, m->ok(), from, m->replica_id()))
        metrics_.bytes_served_by_kind[kind] += bytes;
    if (WorkerInfo *reader = catalog_.find_worker(h.worker_id); reader != nullptr && m->ok()) {
        uint64_t now = clock_ms(), took = m->duration_us() / 1000;
        for (const SourceRead &r : from)
            if (WorkerInfo *holder = r.bytes > 0 ? catalog_.find_worker(r.worker) : nullptr)
                Reachability::read_from(*reader, *holder, now - std::min(now, took), now);
    }
    if (m->ok() && m->duration_us() > 0) metrics_.fetch_seconds.observe(m->duration_us() / 1e6);
    return ack(h);
}

Bytes Service::on_source_failed(const Envelope &env, const Header &h) {
    const SourceFailed *m = env.body_as_SourceFailed();
    if (m->worker_id() == h.worker_id) return ack(h);
    WorkerInfo *w = catalog_.find_worker(m->worker_id());
    std::string reason = m->reason() ? m->reason()->str() : "no reason given";
    if (m->stalled()) {
        // The worker answers; the replica it fills only stands still.
        ReplicaInfo *r = w != nullptr ? catalog_.find_replica(m->replica_id(), m->worker_id()) : nullptr;
        if (r == nullptr || r->complete) return ack(h);
        r->stalled_at = r->chunks_done;
        metrics_.source_stalled++;
        TH_LOG(Info, "worker ", h.worker_id, " left replica ", r->id, " of worker ", m->worker_id(), " '", w->name,
               "' (", reason, "): not routed to until it fills further");
        return ack(h);
    }
    if (m->mismatched() != nullptr && m->mismatched()->size() > 0) {
        // The worker answers; one of its replicas may hold wrong bytes. Only
        // that replica waits for its holder's own check (a replica already
        // gone needs nothing). A report that names only chunks already listed
        // (sent again after a failover, or by another reader) changes nothing
        // and is not counted again.
        std::vector<uint32_t> chunks(m->mismatched()->begin(), m->mismatched()->end());
        Reported done = w != nullptr ? catalog_.report_mismatch(m->worker_id(), m->replica_id(), chunks)
                                     : Reported::no_such_replica;
        if (done == Reported::new_chunks) {
            TH_LOG(Warn, "worker ", h.worker_id, " read from replica ", m->replica_id(), " of worker ", m->worker_id(),
                   " '", w->name, "' chunks that do not match their checksums (", reason,
                   "): not routed to until its holder has checked them");
            metrics_.checksum_mismatch++;
        } else if (done == Reported::no_such_replica && rebuilding()) {
            keep_early_report(m->worker_id(), m->replica_id(), chunks);  // not declared here yet
        }
        return ack(h);
    }
    if (w == nullptr) return ack(h);
    WorkerInfo &reader = *catalog_.find_worker(h.worker_id);  // registered (unknown_sender)
    std::string suspect = reachability_.reported(reader, *w, clock_ms());
    metrics_.source_failed++;
    if (suspect.empty())
        TH_LOG(Warn, "worker ", h.worker_id, " '", reader.name, "' could not read from worker ", m->worker_id(), " '",
               w->name, "': ", reason, "; it still talks to this server: not planned for that reader for now");
    else
        TH_LOG(Warn, "worker ", h.worker_id, " '", reader.name, "' could not read from worker ", m->worker_id(), " '",
               w->name, "': ", reason, "; ", suspect, ": not routed to until it registers again");
    return ack(h);
}

void Service::keep_early_report(uint64_t worker, uint64_t replica, const std::vector<uint32_t> &chunks) {
    constexpr size_t kMaxEarlyReports = 1024;
    auto key = std::make_pair(worker, replica);
    if (early_reports_.size() >= kMaxEarlyReports && !early_reports_.contains(key)) return;
    add_reported_chunks(early_reports_[key], chunks);
    TH_LOG(Info, "worker ", worker, "'s replica ", replica,
           " was reported for chunks that do not match their checksums before it was declared here again: kept "
           "until it is");
}

void Service::apply_early_report(uint64_t worker, uint64_t replica) {
    auto it = early_reports_.find({worker, replica});
    if (it == early_reports_.end()) return;
    if (catalog_.report_mismatch(worker, replica, it->second) == Reported::new_chunks) {
        TH_LOG(Warn, "replica ", replica, " of worker ", worker,
               " was reported before the takeover for chunks that do not match their checksums: not routed to "
               "until its holder has checked them");
        metrics_.checksum_mismatch++;
    }
    early_reports_.erase(it);
}

Bytes Service::on_chunks_checked(const Envelope &env, const Header &h) {
    const ChunksChecked *m = env.body_as_ChunksChecked();
    ReplicaInfo *r = catalog_.find_replica(m->replica_id(), h.worker_id);
    if (r == nullptr) return ack(h);
    std::vector<uint32_t> chunks;
    if (m->chunks() != nullptr) chunks.assign(m->chunks()->begin(), m->chunks()->end());
    if (m->match()) {
        catalog_.chunks_match(*r, chunks);
        TH_LOG(Info, "worker ", h.worker_id, " checked the reported chunks of its replica ", r->id,
               " and they match: ", r->reported.empty() ? "routed to again" : "others are still to be checked");
    } else {
        TH_LOG(Warn, "worker ", h.worker_id, " found its replica ", r->id, " of '", r->key.model, "' version ",
               r->key.version, " shard ", r->key.shard, " corrupt: it withdrew it");
        metrics_.corrupt_replica++;
        catalog_.remove_replica(r->id);
    }
    return ack(h);
}

Bytes Service::on_release(const Envelope &env, const Header &h) {
    uint64_t id = env.body_as_Release()->replica_id();
    if (catalog_.find_replica(id, h.worker_id)) catalog_.remove_replica(id);
    return ack(h);
}

Bytes Service::on_begin_mutation(const Envelope &env, const Header &h) {
    ReplicaInfo &r = catalog_.replica(env.body_as_BeginMutation()->replica_id(), h.worker_id);
    MutationCheck c = catalog_.begin_mutation(r, rebuilding());
    Builder b(64);
    return finish(b, h, CreateBeginMutationReply(b, c.active_reads, c.last_copy, c.filling));
}

Bytes Service::on_cancel_mutation(const Envelope &env, const Header &h) {
    catalog_.replica(env.body_as_CancelMutation()->replica_id(), h.worker_id).mutating = false;
    return ack(h);
}

Bytes Service::on_pin(const Envelope &env, const Header &h) {
    const Pin *p = env.body_as_Pin();
    std::string name = model_name(p->model());
    if (p->on())
        catalog_.pin(name, p->version(), h.worker_id);
    else
        catalog_.unpin(name, p->version(), h.worker_id);
    return ack(h);
}

Bytes Service::on_describe(const Envelope &env, const Header &h) {
    const Describe *d = env.body_as_Describe();
    std::string name = model_name(d->model());
    VersionInfo &v = catalog_.committed_version(name, d->version());
    const ShardInfo &s = Catalog::shard(v, name, d->shard());
    Builder b(1024);
    return finish(b, h, CreateDescribeReply(b, v.number, v.num_shards, v.chunk_bytes, s.total_bytes, put_tensors(b, s.tensors)));
}

void Service::emit(EventKind kind, const std::string &model, uint64_t version, uint64_t replica) {
    if (kind == EventKind::Committed) metrics_.committed++;
    if (kind == EventKind::Retired) metrics_.retired++;
    if (!cfg_.publish_event) return;
    Builder b(128);
    Header h;
    h.epoch = epoch_;
    cfg_.publish_event(finish(b, h, CreateEvent(b, ++event_seq_, kind, b.CreateString(model), version, replica)));
}

void Service::settle_reports(uint64_t now) {
    for (const auto &[w, why] : reachability_.settle(catalog_, now))
        TH_LOG(Warn, "worker ", w->id, " '", w->name, "': ", why, ": not routed to until it registers again");
}

size_t Service::expire(uint64_t now) {
    std::lock_guard lk(mu_);
    settle_reports(now);
    std::vector<uint64_t> dead = catalog_.silent(now, cfg_.lease_ms);
    metrics_.lease_expired += dead.size();
    for (uint64_t id : dead) {
        TH_LOG(Warn, "worker ", id, " '", catalog_.find_worker(id)->name, "' missed its lease (", cfg_.lease_ms,
               " ms); dropping its replicas");
        catalog_.remove_worker(id);
    }
    return dead.size();
}

std::string Service::metrics_text() {
    std::lock_guard lk(mu_);
    return metrics_.render(catalog_);
}

Bytes Service::on_status(const Header &h) { return status_reply(catalog_, h, clock_ms(), start_ms_); }

std::string Service::status_json() {
    Bytes reply;
    {
        std::lock_guard lk(mu_);
        Header h;
        h.epoch = epoch_;
        reply = on_status(h);
    }
    return status_to_json(*GetEnvelope(reply.data())->body_as_StatusReply());
}

}  // namespace th
