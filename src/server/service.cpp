#include "server/service.hpp"

#include <algorithm>
#include <random>

#include "common/deadline.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "wire/status_json.hpp"

namespace th {

namespace fb = flatbuffers;
using namespace wire;

namespace {

constexpr size_t kReplyCacheSize = 4096;
constexpr size_t kMaxModelName = 255;

std::string active_key(const ReplicaKey &k) { return str(k.model, '\x1f', k.version, '\x1f', k.shard); }

uint64_t new_epoch() {
    // Later servers get larger epochs (milliseconds since the Unix epoch in the
    // high bits), so a stale server can be told apart from its successor.
    uint64_t ms = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count());
    return (ms << 12) | (std::random_device{}() & 0xfffu);
}

}  // namespace

uint32_t VersionInfo::published_shards() const {
    return static_cast<uint32_t>(std::count_if(shards.begin(), shards.end(), [](auto &s) { return s.published; }));
}

Service::Service(ServiceConfig cfg) : cfg_(cfg), epoch_(new_epoch()), start_ms_(clock_ms()) {}

Bytes Service::handle(const uint8_t *data, size_t size) {
    Header h;
    try {
        const Envelope *env = verify(data, size);
        h.request_id = env->request_id();
        h.worker_id = env->worker_id();
        std::lock_guard lk(mu_);
        // Epochs fence a stale server. A worker that says Hello with an epoch
        // above ours has been served by a newer server that is gone: we take
        // over above it. (Our own epoch is a worker registering again, after
        // a pause say: no takeover, so no "rebuilding" answers either.) Any
        // other request from a worker that knows a newer epoch means we are
        // the stale one.
        if (env->epoch() > epoch_ && env->body_type() == Body::Hello) {
            TH_LOG(Warn, "taking over from a server of epoch ", env->epoch(), " (was ", epoch_.load(), ")");
            epoch_ = env->epoch() + 1;
            took_over_ms_ = clock_ms();
        }
        h.epoch = epoch_;
        if (env->epoch() > epoch_)
            return error_reply(h, TH_ERR_UNAVAILABLE,
                               str("this server is stale (epoch ", epoch_.load(), "; the worker has seen epoch ", env->epoch(), ")"),
                               {.stale_server = true});
        auto key = std::make_pair(h.worker_id, h.request_id);
        if (h.worker_id != 0) {
            auto it = replies_.find(key);
            if (it != replies_.end()) return it->second;
        }
        if (std::optional<std::string> why = unknown_sender(*env, h))
            return error_reply(h, TH_ERR_UNAVAILABLE, *why, {.unknown_worker = true});
        Bytes reply = dispatch(*env, h);
        bool mutating = env->body_type() == Body::Publish || env->body_type() == Body::FetchDone ||
                        env->body_type() == Body::Release || env->body_type() == Body::PlanFetch ||
                        env->body_type() == Body::Pin;
        if (mutating && h.worker_id != 0) {
            replies_[key] = reply;
            reply_order_.push_back(key);
            if (reply_order_.size() > kReplyCacheSize) {
                replies_.erase(reply_order_.front());
                reply_order_.pop_front();
            }
        }
        return reply;
    } catch (const Error &e) {
        h.epoch = epoch_;
        if (e.code() == TH_ERR_PROTOCOL) {
            bad_requests_total_++;
            TH_LOG(Warn, "bad request from worker ", h.worker_id, ": ", e.what());
        }
        // Just after a takeover, or on a standby before its first one,
        // "unknown" may only mean "not re-declared yet".
        bool missing = e.code() == TH_ERR_NOT_FOUND || e.code() == TH_ERR_NOT_COMMITTED || e.code() == TH_ERR_UNAVAILABLE;
        uint64_t took_over = took_over_ms_;
        bool rebuilding = missing && (took_over == 0 ? cfg_.standby : clock_ms() < took_over + cfg_.lease_ms);
        return error_reply(h, e.code(), e.what(), {.rebuilding = rebuilding});
    } catch (const std::exception &e) {
        h.epoch = epoch_;
        TH_LOG(Error, "request failed: ", e.what());
        return error_reply(h, TH_ERR_INTERNAL, str("server error: ", e.what()));
    }
}

Bytes Service::dispatch(const Envelope &env, const Header &h) {
    if (env.body_type() == Body::Ping) {
        Builder b(64);
        return finish(b, h, CreatePong(b, epoch_));
    }
    switch (env.body_type()) {
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
        case Body::Release: return on_release(env, h);
        case Body::StatusQuery: return on_status(h);
        case Body::Goodbye:
            TH_LOG(Info, "worker ", h.worker_id, " '", workers_.at(h.worker_id).name, "' said goodbye");
            remove_worker(h.worker_id);
            return ack(h);
        default: fail(TH_ERR_PROTOCOL, "unexpected message type ", static_cast<int>(env.body_type()));
    }
}

Bytes Service::ack(const Header &h) {
    Builder b(64);
    return finish(b, h, CreateAck(b));
}

// Every request but Ping, Hello and a status query comes from a registered
// worker. One that is not (this server restarted, or a reader reported the
// worker unreachable) is told so by the reply's unknown_worker flag, and says
// Hello again. The reply's code is TH_ERR_UNAVAILABLE, what a client that
// cannot register again reports to its caller.
std::optional<std::string> Service::unknown_sender(const Envelope &env, const Header &h) {
    Body type = env.body_type();
    if (type == Body::Ping || type == Body::Hello || type == Body::StatusQuery) return std::nullopt;
    auto it = workers_.find(h.worker_id);
    if (h.worker_id == 0 || it == workers_.end())
        return str("worker ", h.worker_id, " is not registered with this server (epoch ", epoch_.load(), ")");
    if (it->second.suspect) return str("worker ", h.worker_id, " was reported unreachable; it must register again");
    it->second.last_seen_ms = clock_ms();
    return std::nullopt;
}

Bytes Service::on_hello(const Envelope &env, const Header &h) {
    const Hello *m = env.body_as_Hello();
    if (m->worker_id() == 0 || m->worker_id() != h.worker_id) fail(TH_ERR_PROTOCOL, "Hello with a bad worker id");
    if (m->ucx_address() == nullptr || m->ucx_address()->size() == 0) fail(TH_ERR_PROTOCOL, "Hello without UCX address");
    auto it = workers_.find(m->worker_id());
    if (it != workers_.end()) remove_worker(m->worker_id());  // re-registration replaces the old state
    (it != workers_.end() ? registered_again_total_ : registered_new_total_)++;
    WorkerInfo &w = workers_[m->worker_id()];
    w.id = m->worker_id();
    w.name = m->name() ? m->name()->str() : "";
    w.labels = get_labels(m->labels());
    w.place = neighbourhood(w.labels);
    w.ucx_address.assign(m->ucx_address()->begin(), m->ucx_address()->end());
    w.last_seen_ms = clock_ms();
    TH_LOG(Info, "worker ", w.id, " '", w.name, "' registered (", format_labels(w.labels), ")");
    Builder b(64);
    return finish(b, h, CreateHelloReply(b, epoch_, cfg_.lease_ms, cfg_.heartbeat_ms, b.CreateString(cfg_.events_url)));
}

ModelInfo &Service::model(const std::string &name) {
    auto it = models_.find(name);
    if (it == models_.end()) fail(TH_ERR_NOT_FOUND, "model '", name, "' is unknown to the server");
    return it->second;
}

VersionInfo &Service::committed_version(const std::string &name, uint64_t version) {
    ModelInfo &m = model(name);
    if (version == UINT64_MAX) {
        if (!m.latest) fail(TH_ERR_NOT_FOUND, "model '", name, "' has no committed version yet");
        version = *m.latest;
    }
    auto it = m.versions.find(version);
    if (it == m.versions.end()) fail(TH_ERR_NOT_FOUND, "model '", name, "' has no version ", version);
    VersionInfo &v = it->second;
    if (!v.committed)
        fail(TH_ERR_NOT_COMMITTED, "version ", version, " of model '", name, "' is not committed: ", v.published_shards(),
             " of ", v.num_shards, " shards published");
    return v;
}

Bytes Service::on_publish(const Envelope &env, const Header &h) {
    const Publish *m = env.body_as_Publish();
    std::string name = required(m->model(), "model name");
    if (name.size() > kMaxModelName) fail(TH_ERR_INVALID_ARG, "model name longer than ", kMaxModelName, " bytes");
    if (m->num_shards() == 0 || m->shard() >= m->num_shards())
        fail(TH_ERR_INVALID_ARG, "shard ", m->shard(), " is out of range for ", m->num_shards(), " shards");
    if (m->num_shards() > 65536) fail(TH_ERR_INVALID_ARG, "num_shards ", m->num_shards(), " is too large");
    if (m->replica_id() == 0) fail(TH_ERR_PROTOCOL, "publish without replica id");
    Layout layout(get_tensors(m->tensors()), m->chunk_bytes());  // validates
    th::ReplicaDesc desc = get_desc(m->replica());
    check_desc(desc, layout.tensors());

    auto mit = models_.find(name);
    if (mit != models_.end()) {
        ModelInfo &mi = mit->second;
        if (mi.latest && m->version() < *mi.latest && !mi.versions.count(m->version()))
            fail(TH_ERR_CONFLICT, "version ", m->version(), " of model '", name, "' is older than the latest committed version ",
                 *mi.latest);
        auto vit = mi.versions.find(m->version());
        if (vit != mi.versions.end()) {
            const VersionInfo &v = vit->second;
            if (v.num_shards != m->num_shards())
                fail(TH_ERR_CONFLICT, "version ", v.number, " of '", name, "' has ", v.num_shards, " shards, this publish says ",
                     m->num_shards());
            if (v.chunk_bytes != m->chunk_bytes())
                fail(TH_ERR_CONFLICT, "version ", v.number, " of '", name, "' uses chunk size ", v.chunk_bytes,
                     ", this publish says ", m->chunk_bytes());
            const ShardInfo &s = v.shards[m->shard()];
            if (s.published) {
                std::string diff = describe_mismatch(s.tensors, layout.tensors());
                if (!diff.empty())
                    fail(TH_ERR_CONFLICT, "shard ", m->shard(), " of version ", v.number, " of '", name,
                         "' was already published with another layout: ", diff);
            }
            // A tensor name has one dtype across the shards of a version.
            for (const ShardInfo &other : v.shards)
                for (const TensorSpec &t : other.tensors)
                    for (const TensorSpec &mine : layout.tensors())
                        if (t.name == mine.name && t.dtype != mine.dtype)
                            fail(TH_ERR_CONFLICT, "tensor '", t.name, "' is ", dtype_name(t.dtype),
                                 " in another shard of version ", v.number, ", ", dtype_name(mine.dtype), " here");
        }
    }
    // Validated: apply.
    ModelInfo &mi = models_[name];
    mi.name = name;
    VersionInfo &v = mi.versions[m->version()];
    if (v.shards.empty()) {
        v.number = m->version();
        v.num_shards = m->num_shards();
        v.chunk_bytes = m->chunk_bytes();
        v.shards.resize(v.num_shards);
    }
    ShardInfo &s = v.shards[m->shard()];
    if (!s.published) {
        s.published = true;
        s.tensors = layout.tensors();
        s.total_bytes = layout.total_bytes();
        s.num_chunks = layout.num_chunks();
    }
    if (auto old = replica_index_.find(m->replica_id()); old != replica_index_.end()) remove_replica(m->replica_id());
    ReplicaInfo &r = s.replicas[m->replica_id()];
    r.id = m->replica_id();
    r.worker = h.worker_id;
    r.holder = &workers_.at(h.worker_id);
    r.publisher = !m->owned();
    r.owned = m->owned();
    r.complete = true;
    r.chunks_done = s.num_chunks;
    r.seq = next_seq_++;
    r.desc = std::move(desc);
    replica_index_[r.id] = {name, v.number, m->shard()};
    index_replica(s, r);
    if (!v.committed && v.published_shards() == v.num_shards) {
        v.committed = true;
        if (!mi.latest || v.number > *mi.latest) mi.latest = v.number;
        TH_LOG(Info, "model '", name, "' version ", v.number, " committed (", v.num_shards, " shards)");
        emit(EventKind::Committed, name, v.number);
        prune(mi);
    }
    Builder b(64);
    return finish(b, h, CreatePublishReply(b, v.committed));
}

Bytes Service::on_resolve(const Envelope &env, const Header &h) {
    const Resolve *m = env.body_as_Resolve();
    VersionInfo &v = committed_version(required(m->model(), "model name"), m->version());
    Builder b(64);
    return finish(b, h, CreateResolveReply(b, v.number, v.num_shards));
}

Bytes Service::on_plan(const Envelope &env, const Header &h) {
    auto started = Clock::now();
    const PlanFetch *m = env.body_as_PlanFetch();
    std::string name = required(m->model(), "model name");
    VersionInfo &v = committed_version(name, m->version());
    if (m->shard() >= v.num_shards)
        fail(TH_ERR_INVALID_ARG, "shard ", m->shard(), " is out of range: version ", v.number, " of '", name, "' has ",
             v.num_shards, " shards");
    ShardInfo &s = v.shards[m->shard()];
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
    WorkerInfo &reader = workers_.at(h.worker_id);

    // A reader that will serve becomes a filling replica now, so later readers
    // can follow it.
    uint64_t reader_seq = 0;
    if (m->replica_id() != 0) {
        auto existing = s.replicas.find(m->replica_id());
        if (existing == s.replicas.end()) {
            th::ReplicaDesc desc = get_desc(m->replica());
            check_desc(desc, s.tensors);
            if (replica_index_.count(m->replica_id())) fail(TH_ERR_PROTOCOL, "replica id reused for another shard");
            ReplicaInfo &r = s.replicas[m->replica_id()];
            r.id = m->replica_id();
            r.worker = h.worker_id;
            r.holder = &reader;
            r.seq = next_seq_++;
            r.desc = std::move(desc);
            replica_index_[r.id] = key;
            index_replica(s, r);
            reader_seq = r.seq;
        } else {
            if (existing->second.worker != h.worker_id) fail(TH_ERR_PROTOCOL, "replica id belongs to another worker");
            reader_seq = existing->second.seq;
        }
    }

    Request req;
    req.labels = &reader.labels;
    req.reader_worker = h.worker_id;
    req.reader_seq = reader_seq;
    if (const auto *ex = aligned(m->exclude(), "exclude list")) req.exclude.assign(ex->begin(), ex->end());
    if (const auto *ex = aligned(m->exclude_replicas(), "exclude list")) req.exclude_replicas.assign(ex->begin(), ex->end());
    // The policy ranks by distance first, so the best eligible holder on the
    // reader's host, else in its rack or zone, is the best of all; only when
    // there is none does the plan go by load (pick_by_load).
    auto group = [&](const std::string &key) -> const std::vector<ReplicaInfo *> * {
        if (key.empty()) return nullptr;
        auto it = s.nearby.find(key);
        return it == s.nearby.end() ? nullptr : &it->second;
    };
    std::vector<const std::vector<ReplicaInfo *> *> same_host, same_rack;
    if (auto *g = group(reader.place.host)) same_host.push_back(g);
    for (const std::string *key : {&reader.place.rack, &reader.place.zone})
        if (auto *g = group(*key)) same_rack.push_back(g);
    std::optional<uint64_t> chosen;
    if (!same_host.empty()) chosen = pick_source(req, same_host);
    if (!chosen && !same_rack.empty()) chosen = pick_source(req, same_rack);
    if (!chosen) chosen = pick_by_load(req, s, reader.place.dc);
    if (!chosen) {
        size_t holders = std::count_if(s.replicas.begin(), s.replicas.end(),
                                       [&](auto &kv) { return routable(kv.second) && kv.second.worker != h.worker_id; });
        if (holders == 0)
            fail(TH_ERR_UNAVAILABLE, "no live holder of model '", name, "' version ", v.number, " shard ", m->shard());
        fail(TH_ERR_UNAVAILABLE, "every holder of model '", name, "' version ", v.number, " shard ", m->shard(),
             " failed this reader (", holders, " tried)");
    }
    ReplicaInfo &src = s.replicas.at(*chosen);
    WorkerInfo &sw = workers_.at(src.worker);
    // Move the reader's active read to the new source.
    end_reads(h.worker_id, key);
    sw.active_reads++;
    src.active_reads++;
    rerank(sw);
    active_[{h.worker_id, active_key(key)}] = {src.id};

    Builder b(1024);
    auto range = CreateSourceRange(b, src.worker, b.CreateVector(sw.ucx_address), put_desc(b, src.desc), src.complete,
                                   first, count, src.id, src.publisher);
    std::vector<fb::Offset<SourceRange>> ranges{range};
    auto reply = CreatePlanReply(b, v.number, v.chunk_bytes, s.total_bytes, put_tensors(b, s.tensors), b.CreateVector(ranges),
                                 v.num_shards);
    Bytes out = finish(b, h, reply);
    plan_seconds_.observe(std::chrono::duration<double>(Clock::now() - started).count());
    return out;
}

bool Service::routable(const ReplicaInfo &r) const { return !r.holder->suspect && !r.mutating; }

Candidate Service::candidate(const ReplicaInfo &r) const {
    const WorkerInfo &w = *r.holder;
    return {r.worker, r.id, &w.labels, r.complete, w.active_reads, r.seq, w.bytes_served, r.publisher || r.owned};
}

std::optional<uint64_t> Service::pick_source(const Request &req,
                                             const std::vector<const std::vector<ReplicaInfo *> *> &groups) const {
    std::vector<Candidate> cands;
    for (const auto *g : groups)
        for (const ReplicaInfo *r : *g)
            if (routable(*r)) cands.push_back(candidate(*r));
    auto chosen = choose_source(req, cands, cfg_.policy);
    if (!chosen) return std::nullopt;
    return cands[*chosen].replica_id;
}

std::optional<uint64_t> Service::pick_by_load(const Request &req, const ShardInfo &s, const std::string &dc) const {
    // No holder at SameRack or closer is eligible, so in the reader's own
    // datacenter the first eligible in load order is the policy's choice; only
    // without one does it cross, to the best of each other's first eligible.
    using Filed = std::pair<LoadRank, uint64_t>;
    auto first_eligible = [&](const std::set<Filed> &filed) -> const Filed * {
        for (const Filed &f : filed) {
            const ReplicaInfo &r = s.replicas.at(f.second);
            if (routable(r) && eligible(req, candidate(r))) return &f;
        }
        return nullptr;
    };
    if (auto home = s.by_load.find(dc); home != s.by_load.end())
        if (const Filed *f = first_eligible(home->second)) return f->second;
    const Filed *best = nullptr;
    for (const auto &[other, filed] : s.by_load)
        if (other != dc)
            if (const Filed *f = first_eligible(filed); f && (!best || *f < *best)) best = f;
    if (!best) return std::nullopt;
    return best->second;
}

void Service::file(ReplicaInfo &r) {
    r.rank = load_rank(candidate(r), cfg_.policy);
    r.shard->by_load[r.holder->place.dc].insert({r.rank, r.id});
}

void Service::unfile(ReplicaInfo &r) {
    auto it = r.shard->by_load.find(r.holder->place.dc);
    if (it == r.shard->by_load.end()) return;
    it->second.erase({r.rank, r.id});
    if (it->second.empty()) r.shard->by_load.erase(it);
}

void Service::rerank(WorkerInfo &w) {
    for (ReplicaInfo *r : w.held) {
        unfile(*r);
        file(*r);
    }
}

void Service::index_replica(ShardInfo &s, ReplicaInfo &r) {
    r.shard = &s;
    r.holder->held.push_back(&r);
    const Neighbourhood &place = r.holder->place;
    for (const std::string *key : {&place.host, &place.rack, &place.zone})
        if (!key->empty()) s.nearby[*key].push_back(&r);
    file(r);
}

void Service::unindex_replica(ReplicaInfo &r) {
    unfile(r);
    auto &held = r.holder->held;
    held.erase(std::remove(held.begin(), held.end(), &r), held.end());
    const Neighbourhood &place = r.holder->place;
    for (const std::string *key : {&place.host, &place.rack, &place.zone}) {
        auto it = key->empty() ? r.shard->nearby.end() : r.shard->nearby.find(*key);
        if (it == r.shard->nearby.end()) continue;
        auto &near = it->second;
        near.erase(std::remove(near.begin(), near.end(), &r), near.end());
        if (near.empty()) r.shard->nearby.erase(it);
    }
}

void Service::end_reads(uint64_t reader, const ReplicaKey &key) { end_reads_of({reader, active_key(key)}); }

void Service::end_reads_of(const ActiveKey &key) {
    auto it = active_.find(key);
    if (it == active_.end()) return;
    std::vector<uint64_t> sources = std::move(it->second);
    active_.erase(it);
    for (uint64_t rid : sources) {
        auto idx = replica_index_.find(rid);
        if (idx == replica_index_.end()) continue;  // removed meanwhile; its counts went with it
        const ReplicaKey &k = idx->second;
        ReplicaInfo &r = models_.at(k.model).versions.at(k.version).shards[k.shard].replicas.at(rid);
        if (r.active_reads > 0) r.active_reads--;
        auto wit = workers_.find(r.worker);
        if (wit != workers_.end() && wit->second.active_reads > 0) {
            wit->second.active_reads--;
            rerank(wit->second);
        }
        if (r.mutating && r.active_reads == 0) emit(EventKind::Drained, k.model, k.version, rid);
    }
}

Bytes Service::on_progress(const Envelope &env, const Header &h) {
    const Progress *m = env.body_as_Progress();
    auto it = replica_index_.find(m->replica_id());
    if (it != replica_index_.end()) {
        ReplicaInfo &r = models_.at(it->second.model).versions.at(it->second.version).shards[it->second.shard].replicas.at(
            m->replica_id());
        if (r.worker == h.worker_id && !r.complete) r.chunks_done = std::max(r.chunks_done, m->chunks_done());
    }
    return ack(h);
}

Bytes Service::on_fetch_done(const Envelope &env, const Header &h) {
    const FetchDone *m = env.body_as_FetchDone();
    std::string name = required(m->model(), "model name");
    ReplicaKey key{name, m->version(), m->shard()};
    end_reads(h.worker_id, key);
    auto mit = models_.find(name);
    VersionInfo *v = nullptr;
    if (mit != models_.end()) {
        auto vit = mit->second.versions.find(m->version());
        if (vit != mit->second.versions.end() && m->shard() < vit->second.num_shards) v = &vit->second;
    }
    if (v != nullptr && m->bytes_from()) {
        for (const auto *sb : *m->bytes_from()) {
            auto wit = workers_.find(sb->worker_id());
            if (wit != workers_.end()) {
                wit->second.bytes_served += sb->bytes();
                rerank(wit->second);
            }
            auto &replicas = v->shards[m->shard()].replicas;
            auto rit = replicas.find(sb->replica_id());
            if (rit != replicas.end() && rit->second.worker == sb->worker_id()) {
                rit->second.bytes_served += sb->bytes();
                const ReplicaInfo &r = rit->second;
                bytes_served_by_kind_[r.owned ? "owned" : r.publisher ? "publisher" : "replica"] += sb->bytes();
            }
            if (m->ok()) v->reads.push_back({h.worker_id, sb->worker_id(), m->shard(), sb->bytes()});
        }
        constexpr size_t kMaxReads = 4096;
        if (v->reads.size() > kMaxReads) v->reads.erase(v->reads.begin(), v->reads.end() - kMaxReads);
    }
    if (m->ok() && m->duration_us() > 0) fetch_seconds_.observe(m->duration_us() / 1e6);
    if (m->replica_id() != 0) {
        auto it = replica_index_.find(m->replica_id());
        if (it != replica_index_.end()) {
            ReplicaInfo &r = models_.at(it->second.model).versions.at(it->second.version).shards[it->second.shard].replicas.at(
                m->replica_id());
            if (r.worker != h.worker_id) fail(TH_ERR_PROTOCOL, "replica belongs to another worker");
            if (m->ok()) {
                r.complete = true;
                rerank(*r.holder);
                r.chunks_done = models_.at(it->second.model).versions.at(it->second.version).shards[it->second.shard].num_chunks;
            } else {
                remove_replica(m->replica_id());
            }
        }
    }
    return ack(h);
}

Bytes Service::on_source_failed(const Envelope &env, const Header &h) {
    const SourceFailed *m = env.body_as_SourceFailed();
    auto it = workers_.find(m->worker_id());
    if (it != workers_.end() && m->worker_id() != h.worker_id) {
        TH_LOG(Warn, "worker ", h.worker_id, " could not read from worker ", m->worker_id(), " '", it->second.name, "': ",
               m->reason() ? m->reason()->str() : "no reason given");
        it->second.suspect = true;
        source_failed_total_++;
    }
    return ack(h);
}

Bytes Service::on_release(const Envelope &env, const Header &h) {
    const Release *m = env.body_as_Release();
    auto it = replica_index_.find(m->replica_id());
    if (it != replica_index_.end()) {
        const ReplicaKey &k = it->second;
        const ReplicaInfo &r = models_.at(k.model).versions.at(k.version).shards[k.shard].replicas.at(m->replica_id());
        if (r.worker != h.worker_id) fail(TH_ERR_INVALID_ARG, "replica ", m->replica_id(), " belongs to another worker");
        remove_replica(m->replica_id());
    }
    return ack(h);
}

void Service::remove_replica(uint64_t replica_id) {
    auto it = replica_index_.find(replica_id);
    if (it == replica_index_.end()) return;
    ReplicaKey k = it->second;
    replica_index_.erase(it);
    ModelInfo &m = models_.at(k.model);
    auto &replicas = m.versions.at(k.version).shards[k.shard].replicas;
    ReplicaInfo &r = replicas.at(replica_id);
    unindex_replica(r);
    // Readers still planned onto it stop loading its worker.
    WorkerInfo &w = *r.holder;
    w.active_reads -= std::min(w.active_reads, r.active_reads);
    rerank(w);
    replicas.erase(replica_id);
    prune(m);
}

// Forgets versions that can never be read again: no replica left and not the
// latest committed one.
void Service::prune(ModelInfo &m) {
    for (auto it = m.versions.begin(); it != m.versions.end();) {
        const VersionInfo &v = it->second;
        bool empty = std::all_of(v.shards.begin(), v.shards.end(), [](auto &s) { return s.replicas.empty(); });
        if (empty && (!m.latest || v.number != *m.latest) && !m.pins.count(v.number)) {
            emit(EventKind::Retired, m.name, v.number);
            it = m.versions.erase(it);
        } else {
            ++it;
        }
    }
}

bool Service::is_required(const ModelInfo &m, const VersionInfo &v) const {
    if (m.latest && *m.latest == v.number) return true;
    if (m.pins.count(v.number)) return true;
    // A reader still fetching it, even one whose source has just gone.
    std::string prefix = str(m.name, '\x1f', v.number, '\x1f');
    for (const auto &[key, sources] : active_)
        if (key.second.compare(0, prefix.size(), prefix) == 0) return true;
    return false;
}

void Service::emit(EventKind kind, const std::string &model, uint64_t version, uint64_t replica_id) {
    if (kind == EventKind::Committed) committed_total_++;
    if (kind == EventKind::Retired) retired_total_++;
    if (!cfg_.publish_event) return;
    Builder b(128);
    Header h;
    h.epoch = epoch_;
    cfg_.publish_event(finish(b, h, CreateEvent(b, ++event_seq_, kind, b.CreateString(model), version, replica_id)));
}

ReplicaInfo &Service::own_replica(uint64_t replica_id, uint64_t worker, ReplicaKey *key) {
    auto it = replica_index_.find(replica_id);
    if (it == replica_index_.end()) fail(TH_ERR_NOT_FOUND, "replica ", replica_id, " is not registered");
    const ReplicaKey &k = it->second;
    ReplicaInfo &r = models_.at(k.model).versions.at(k.version).shards[k.shard].replicas.at(replica_id);
    if (r.worker != worker) fail(TH_ERR_INVALID_ARG, "replica ", replica_id, " belongs to another worker");
    if (key) *key = k;
    return r;
}

Bytes Service::on_heartbeat(const Header &h) {
    // Owned copies whose version nobody needs any more can be freed.
    // Every worker sends one a second: look at its own replicas only.
    std::vector<uint64_t> drop;
    for (const ReplicaInfo *r : workers_.at(h.worker_id).held) {
        if (!r->owned) continue;
        const ReplicaKey &key = replica_index_.at(r->id);
        ModelInfo &m = models_.at(key.model);
        if (!is_required(m, m.versions.at(key.version))) drop.push_back(r->id);
    }
    Builder b(64);
    return finish(b, h, CreateHeartbeatReply(b, b.CreateVector(drop)));
}

Bytes Service::on_begin_mutation(const Envelope &env, const Header &h) {
    ReplicaKey k;
    ReplicaInfo &r = own_replica(env.body_as_BeginMutation()->replica_id(), h.worker_id, &k);
    ModelInfo &m = models_.at(k.model);
    VersionInfo &v = m.versions.at(k.version);
    const ShardInfo &s = v.shards[k.shard];
    uint32_t others = 0, filling = 0;
    for (const auto &[id, o] : s.replicas) {
        if (id == r.id || o.mutating) continue;
        auto wit = workers_.find(o.worker);
        if (wit == workers_.end() || wit->second.suspect) continue;
        (o.complete ? others : filling)++;
    }
    bool last = r.complete && v.committed && others == 0 && is_required(m, v);
    // The last copy stays routable while its holder copies it (or waits for
    // another to complete); the holder asks again once it has.
    r.mutating = !last;
    Builder b(64);
    return finish(b, h, CreateBeginMutationReply(b, r.active_reads, last, filling));
}

Bytes Service::on_cancel_mutation(const Envelope &env, const Header &h) {
    own_replica(env.body_as_CancelMutation()->replica_id(), h.worker_id).mutating = false;
    return ack(h);
}

Bytes Service::on_pin(const Envelope &env, const Header &h) {
    const Pin *p = env.body_as_Pin();
    std::string name = required(p->model(), "model name");
    if (p->on()) {
        VersionInfo &v = committed_version(name, p->version());
        models_.at(name).pins[v.number].insert(h.worker_id);
    } else {
        ModelInfo &m = model(name);
        auto it = m.pins.find(p->version());
        if (it == m.pins.end() || !it->second.erase(h.worker_id))
            fail(TH_ERR_NOT_FOUND, "version ", p->version(), " of '", name, "' is not pinned by this worker");
        if (it->second.empty()) m.pins.erase(it);
        prune(m);
    }
    return ack(h);
}

Bytes Service::on_describe(const Envelope &env, const Header &h) {
    const Describe *d = env.body_as_Describe();
    std::string name = required(d->model(), "model name");
    VersionInfo &v = committed_version(name, d->version());
    if (d->shard() >= v.num_shards)
        fail(TH_ERR_INVALID_ARG, "shard ", d->shard(), " is out of range: version ", v.number, " of '", name, "' has ",
             v.num_shards, " shards");
    const ShardInfo &s = v.shards[d->shard()];
    Builder b(1024);
    return finish(b, h, CreateDescribeReply(b, v.number, v.num_shards, v.chunk_bytes, s.total_bytes, put_tensors(b, s.tensors)));
}

void Service::remove_worker(uint64_t worker_id) {
    std::vector<uint64_t> gone;
    for (auto &[id, key] : replica_index_) {
        const ReplicaInfo &r = models_.at(key.model).versions.at(key.version).shards[key.shard].replicas.at(id);
        if (r.worker == worker_id) gone.push_back(id);
    }
    for (uint64_t id : gone) remove_replica(id);
    std::vector<ActiveKey> reads;
    for (auto &[key, srcs] : active_)
        if (key.first == worker_id) reads.push_back(key);
    for (auto &key : reads) end_reads_of(key);
    for (auto &[name, m] : models_) {
        for (auto it = m.pins.begin(); it != m.pins.end();) {
            it->second.erase(worker_id);
            it = it->second.empty() ? m.pins.erase(it) : std::next(it);
        }
        prune(m);
    }
    workers_.erase(worker_id);
}

size_t Service::expire(uint64_t now) {
    std::lock_guard lk(mu_);
    std::vector<uint64_t> dead;
    for (auto &[id, w] : workers_)
        if (now > w.last_seen_ms + cfg_.lease_ms) dead.push_back(id);
    lease_expired_total_ += dead.size();
    for (uint64_t id : dead) {
        TH_LOG(Warn, "worker ", id, " '", workers_.at(id).name, "' missed its lease (", cfg_.lease_ms,
               " ms); dropping its replicas");
        remove_worker(id);
    }
    return dead.size();
}

std::string Service::metrics_text() {
    std::lock_guard lk(mu_);
    std::string out;
    auto label = [](std::initializer_list<std::pair<const char *, std::string>> kv) {
        std::string l = "{";
        for (const auto &[k, v] : kv) {
            if (l.size() > 1) l += ',';
            l += std::string(k) + "=\"";
            for (char c : v) l += (c == '"' || c == '\\') ? std::string("\\") + c : c == '\n' ? std::string("\\n") : std::string(1, c);
            l += '"';
        }
        return l + "}";
    };
    render_family(out, "tensorhub_build_info", "gauge", "Version of the tensorhub server.",
                  {{label({{"version", th_version()}}), 1}});
    render_family(out, "tensorhub_workers", "gauge", "Registered workers.", {{"", double(workers_.size())}});
    std::vector<std::pair<std::string, double>> replicas, latest;
    for (const auto &[name, m] : models_) {
        if (m.latest) latest.push_back({label({{"model", name}}), double(*m.latest)});
        for (const auto &[num, v] : m.versions) {
            std::map<std::string, int> kinds;
            for (const ShardInfo &s : v.shards)
                for (const auto &[id, r] : s.replicas) kinds[r.owned ? "owned" : r.publisher ? "publisher" : "replica"]++;
            for (const auto &[kind, n] : kinds)
                replicas.push_back({label({{"model", name}, {"version", std::to_string(num)}, {"kind", kind}}), double(n)});
        }
    }
    render_family(out, "tensorhub_replicas", "gauge", "Replicas per model version and kind.", replicas);
    render_family(out, "tensorhub_latest_version", "gauge", "Newest committed version per model.", latest);
    render_family(out, "tensorhub_versions_committed_total", "counter", "Versions committed.", {{"", double(committed_total_)}});
    render_family(out, "tensorhub_versions_retired_total", "counter", "Versions no holder or requirement keeps.",
                  {{"", double(retired_total_)}});
    std::vector<std::pair<std::string, double>> served;
    for (const auto &[kind, n] : bytes_served_by_kind_) served.push_back({label({{"source_kind", kind}}), double(n)});
    render_family(out, "tensorhub_bytes_served_total", "counter", "Bytes readers fetched, by kind of source.", served);
    render_family(out, "tensorhub_registrations_total", "counter",
                  "Workers' Hellos: new workers, and registered ones that said Hello again.",
                  {{label({{"kind", "new"}}), double(registered_new_total_)},
                   {label({{"kind", "again"}}), double(registered_again_total_)}});
    render_family(out, "tensorhub_failures_total", "counter", "Failures seen by the server, by kind.",
                  {{label({{"kind", "source_failed"}}), double(source_failed_total_)},
                   {label({{"kind", "lease_expired"}}), double(lease_expired_total_)},
                   {label({{"kind", "bad_request"}}), double(bad_requests_total_.load())}});
    plan_seconds_.render(out, "tensorhub_plan_seconds", "Time the server spent planning a fetch.");
    fetch_seconds_.render(out, "tensorhub_fetch_seconds", "Duration of completed fetches, as readers report them.");
    return out;
}

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

Bytes Service::on_status(const Header &h) {
    Builder b(4096);
    uint64_t now = clock_ms();
    std::vector<const WorkerInfo *> by_id;
    for (const auto &[id, w] : workers_) by_id.push_back(&w);
    std::sort(by_id.begin(), by_id.end(), [](auto *a, auto *b) { return a->id < b->id; });
    // Reads still running, so that the replication tree shows as it forms:
    // shard of a version -> (reader, source worker).
    std::map<std::string, std::vector<std::pair<uint64_t, uint64_t>>> running;
    for (auto &[key, sources] : active_)
        for (uint64_t rid : sources)
            if (auto idx = replica_index_.find(rid); idx != replica_index_.end()) {
                const ReplicaKey &k = idx->second;
                uint64_t source = models_.at(k.model).versions.at(k.version).shards[k.shard].replicas.at(rid).worker;
                running[key.second].push_back({key.first, source});
            }
    std::vector<fb::Offset<WorkerStatus>> workers;
    for (const WorkerInfo *w : by_id)
        workers.push_back(CreateWorkerStatus(b, w->id, b.CreateString(w->name), put_labels(b, w->labels), w->bytes_served,
                                             w->active_reads, now - std::min(now, w->last_seen_ms)));
    std::vector<fb::Offset<ModelStatus>> models;
    for (auto &[name, m] : models_) {
        std::vector<fb::Offset<VersionStatus>> versions;
        for (auto &[num, v] : m.versions) {
            std::vector<fb::Offset<ShardStatus>> shards;
            for (uint32_t i = 0; i < v.shards.size(); ++i) {
                const ShardInfo &s = v.shards[i];
                std::vector<fb::Offset<ReplicaStatus>> reps;
                for (auto &[rid, r] : s.replicas)
                    reps.push_back(CreateReplicaStatus(b, rid, r.worker, r.chunks_done, r.complete, r.bytes_served,
                                                       r.publisher, r.owned, r.mutating, r.active_reads));
                shards.push_back(CreateShardStatus(b, i, s.total_bytes, s.num_chunks, b.CreateVector(reps)));
            }
            std::vector<fb::Offset<ReadStatus>> reads;
            for (auto &r : v.reads) reads.push_back(CreateReadStatus(b, r.reader, r.source, r.shard, r.bytes));
            for (uint32_t i = 0; i < v.shards.size(); ++i)
                for (auto &[reader, source] : running[active_key({name, num, i})])
                    reads.push_back(CreateReadStatus(b, reader, source, i, 0, true));
            versions.push_back(CreateVersionStatus(b, num, v.num_shards, v.committed, m.pins.count(num) > 0,
                                                   is_required(m, v), b.CreateVector(shards), b.CreateVector(reads)));
        }
        models.push_back(CreateModelStatus(b, b.CreateString(name), m.latest.value_or(0), m.latest.has_value(),
                                           b.CreateVector(versions)));
    }
    return finish(b, h, CreateStatusReply(b, epoch_, now - start_ms_, b.CreateVector(workers), b.CreateVector(models)));
}

}  // namespace th
