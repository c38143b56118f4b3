#include "server/catalog.hpp"

#include <algorithm>

#include "common/error.hpp"
#include "common/stripes.hpp"
#include "common/log.hpp"

namespace th {

const char *replica_kind(const ReplicaInfo &r) { return r.owned ? "owned" : r.publisher ? "publisher" : "replica"; }

uint32_t VersionInfo::published_shards() const {
    return static_cast<uint32_t>(std::count_if(shards.begin(), shards.end(), [](auto &s) { return s.published; }));
}

Candidate candidate(const ReplicaInfo &r) {
    const WorkerInfo &w = *r.holder;
    return {r.worker, r.id, &w.labels, r.complete, w.active_reads, r.seq, w.bytes_served, r.publisher || r.owned};
}

bool routable(const ReplicaInfo &r) {
    return !r.holder->suspect && !r.mutating && !r.sourceless && r.reported.empty() && !r.stalled();
}

// ---- workers

WorkerInfo *Catalog::find_worker(uint64_t id) {
    auto it = workers_.find(id);
    return it == workers_.end() ? nullptr : &it->second;
}

bool Catalog::register_worker(WorkerInfo w) {
    bool again = workers_.count(w.id) > 0;
    if (again) {
        // What readers reported and the worker has not checked yet holds for
        // the replicas it declares again.
        WorkerInfo &before = workers_.at(w.id);
        w.unchecked = std::move(before.unchecked);  // not declared again since the last time
        w.avoid = std::move(before.avoid);          // its paths to others did not change
        for (const ReplicaInfo *r : before.held)
            if (!r->reported.empty()) w.unchecked[r->id] = r->reported;
        remove_worker(w.id);
    }
    uint64_t id = w.id;
    workers_[id] = std::move(w);
    return again;
}

void Catalog::remove_worker(uint64_t id) {
    auto it = workers_.find(id);
    if (it == workers_.end()) return;
    std::vector<uint64_t> gone;
    for (const ReplicaInfo *r : it->second.held) gone.push_back(r->id);
    for (uint64_t rid : gone) remove_replica(rid);
    std::vector<ReadKey> reads;
    for (const auto &[key, sources] : reads_)
        if (std::get<3>(key) == id) reads.push_back(key);
    for (const ReadKey &key : reads) end_read(key);
    for (auto &[name, m] : models_) {
        for (auto pit = m.pins.begin(); pit != m.pins.end();) {
            pit->second.erase(id);
            pit = pit->second.empty() ? m.pins.erase(pit) : std::next(pit);
        }
        prune(m);
    }
    workers_.erase(id);
}

std::vector<uint64_t> Catalog::silent(uint64_t now_ms, uint32_t lease_ms) const {
    std::vector<uint64_t> out;
    for (const auto &[id, w] : workers_)
        if (now_ms > w.last_seen_ms + lease_ms) out.push_back(id);
    return out;
}

// ---- models and versions

ModelInfo &Catalog::model(const std::string &name) {
    auto it = models_.find(name);
    if (it == models_.end()) fail(TH_ERR_NOT_FOUND, "model '", name, "' is unknown to the server");
    return it->second;
}

VersionInfo *Catalog::find_version(const ReplicaKey &key) {
    auto mit = models_.find(key.model);
    if (mit == models_.end()) return nullptr;
    auto vit = mit->second.versions.find(key.version);
    return vit == mit->second.versions.end() ? nullptr : &vit->second;
}

VersionInfo &Catalog::committed_version(const std::string &name, uint64_t version) {
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

ShardInfo &Catalog::shard(VersionInfo &v, const std::string &model, uint32_t shard) {
    if (shard >= v.num_shards)
        fail(TH_ERR_INVALID_ARG, "shard ", shard, " is out of range: version ", v.number, " of '", model, "' has ",
             v.num_shards, " shards");
    // Committed under an earlier server, but nobody declared this shard again.
    if (!v.shards[shard].published)
        fail(TH_ERR_UNAVAILABLE, "no live holder of model '", model, "' version ", v.number, " shard ", shard,
             " (its holders let it go before this server took over)");
    return v.shards[shard];
}

bool Catalog::is_required(const ModelInfo &m, const VersionInfo &v) const {
    if (m.latest && *m.latest == v.number) return true;
    if (m.pins.count(v.number)) return true;
    // A reader still fetching it, even one whose source has just gone.
    auto it = reads_.lower_bound({m.name, v.number, 0, 0});
    return it != reads_.end() && std::get<0>(it->first) == m.name && std::get<1>(it->first) == v.number;
}

void Catalog::pin(const std::string &name, uint64_t version, uint64_t worker) {
    VersionInfo &v = committed_version(name, version);
    models_.at(name).pins[v.number].insert(worker);
}

void Catalog::unpin(const std::string &name, uint64_t version, uint64_t worker) {
    ModelInfo &m = model(name);
    auto it = m.pins.find(version);
    if (it == m.pins.end() || !it->second.erase(worker))
        fail(TH_ERR_NOT_FOUND, "version ", version, " of '", name, "' is not pinned by this worker");
    if (it->second.empty()) m.pins.erase(it);
    prune(m);
}

// Forgets versions that can never be read again: no replica left, not the
// latest committed one and not pinned.
void Catalog::prune(ModelInfo &m) {
    for (auto it = m.versions.begin(); it != m.versions.end();) {
        const VersionInfo &v = it->second;
        bool empty = std::all_of(v.shards.begin(), v.shards.end(), [](auto &s) { return s.replicas.empty(); });
        if (empty && (!m.latest || v.number != *m.latest) && !m.pins.count(v.number)) {
            notify_(wire::EventKind::Retired, m.name, v.number, 0);
            it = m.versions.erase(it);
        } else {
            ++it;
        }
    }
}

// ---- replicas

// The agreement rules of a version (docs/design.md, "Layout and chunks").
void Catalog::check_agrees(const Publication &p) const {
    const ReplicaKey &k = p.key;
    auto mit = models_.find(k.model);
    if (mit == models_.end()) return;
    const ModelInfo &mi = mit->second;
    auto vit = mi.versions.find(k.version);
    if (vit == mi.versions.end()) {
        if (mi.latest && k.version < *mi.latest && !p.again)
            fail(TH_ERR_CONFLICT, "version ", k.version, " of model '", k.model,
                 "' is older than the latest committed version ", *mi.latest);
        return;
    }
    const VersionInfo &v = vit->second;
    if (v.num_shards != p.num_shards)
        fail(TH_ERR_CONFLICT, "version ", v.number, " of '", k.model, "' has ", v.num_shards, " shards, this publish says ",
             p.num_shards);
    if (v.chunk_bytes != p.layout.chunk_bytes())
        fail(TH_ERR_CONFLICT, "version ", v.number, " of '", k.model, "' uses chunk size ", v.chunk_bytes,
             ", this publish says ", p.layout.chunk_bytes());
    const ShardInfo &s = v.shards[k.shard];
    if (s.published) {
        std::string diff = describe_mismatch(s.tensors, p.layout.tensors());
        if (!diff.empty())
            fail(TH_ERR_CONFLICT, "shard ", k.shard, " of version ", v.number, " of '", k.model,
                 "' was already published with another layout: ", diff);
        if (!s.checksums.empty() && !p.checksums.empty() && s.checksums != p.checksums) {
            size_t c = 0;
            while (s.checksums[c] == p.checksums[c]) ++c;
            fail(TH_ERR_CONFLICT, "shard ", k.shard, " of version ", v.number, " of '", k.model,
                 "' was already published with other bytes: chunk ", c, " has another checksum");
        }
    }
    // A tensor name has one dtype across the shards of a version.
    for (const ShardInfo &other : v.shards)
        for (const TensorSpec &t : other.tensors)
            for (const TensorSpec &mine : p.layout.tensors())
                if (t.name == mine.name && t.dtype != mine.dtype)
                    fail(TH_ERR_CONFLICT, "tensor '", t.name, "' is ", dtype_name(t.dtype), " in another shard of version ",
                         v.number, ", ", dtype_name(mine.dtype), " here");
}

bool Catalog::publish(uint64_t worker, Publication p) {
    check_agrees(p);
    // The same replica declared again (its holder re-registering, say)
    // replaces the old record.
    if (find_replica(p.replica_id, worker)) remove_replica(p.replica_id);
    const ReplicaKey &k = p.key;
    ModelInfo &mi = models_[k.model];
    mi.name = k.model;
    VersionInfo &v = mi.versions[k.version];
    if (v.shards.empty()) {
        v.number = k.version;
        v.num_shards = p.num_shards;
        v.chunk_bytes = p.layout.chunk_bytes();
        v.shards.resize(v.num_shards);
    }
    ShardInfo &s = v.shards[k.shard];
    if (!s.published) {
        s.published = true;
        s.tensors = p.layout.tensors();
        s.total_bytes = p.layout.total_bytes();
        s.num_chunks = p.layout.num_chunks();
        uint32_t wanted = policy_.stripes != 0 ? policy_.stripes
                          : workers_.size() >= kAutoStripesWorkers ? kAutoStripes
                                                                   : 1;
        s.stripes = stripes_for(s.num_chunks, wanted);
    }
    if (s.checksums.empty()) s.checksums = std::move(p.checksums);
    ReplicaInfo &r = new_replica(s, k, worker, p.replica_id, std::move(p.desc));
    if (auto u = r.holder->unchecked.extract(r.id)) r.reported = std::move(u.mapped());
    r.publisher = !p.owned;
    r.owned = p.owned;
    r.complete = true;
    r.chunks_done = s.num_chunks;
    index_replica(r);
    uint32_t published = v.published_shards();
    if (!v.committed && (published == v.num_shards || p.committed)) {
        v.committed = true;
        if (!mi.latest || v.number > *mi.latest) mi.latest = v.number;
        TH_LOG(Info, "model '", k.model, "' version ", v.number, " committed (", v.num_shards, " shards",
               published == v.num_shards ? "" : str(", committed before; ", published, " declared again"), ")");
        notify_(wire::EventKind::Committed, k.model, v.number, 0);
        prune(mi);
    }
    return v.committed;
}

ReplicaInfo &Catalog::add_filling(uint64_t worker, const ReplicaKey &key, uint64_t id, ReplicaDesc desc) {
    ShardInfo &s = models_.at(key.model).versions.at(key.version).shards.at(key.shard);
    ReplicaInfo &r = new_replica(s, key, worker, id, std::move(desc));
    index_replica(r);
    return r;
}

ReplicaInfo &Catalog::new_replica(ShardInfo &s, const ReplicaKey &key, uint64_t worker, uint64_t id, ReplicaDesc desc) {
    ReplicaInfo &r = s.replicas[id];
    r.id = id;
    r.worker = worker;
    r.holder = &workers_.at(worker);
    r.shard = &s;
    r.key = key;
    r.seq = next_seq_++;
    r.desc = std::move(desc);
    replicas_[id] = &r;
    return r;
}

ReplicaInfo *Catalog::find_replica(uint64_t id, uint64_t worker) {
    auto it = replicas_.find(id);
    if (it == replicas_.end()) return nullptr;
    ReplicaInfo &r = *it->second;
    if (r.worker != worker) fail(TH_ERR_PROTOCOL, "replica ", id, " belongs to worker ", r.worker, ", not to ", worker);
    return &r;
}

ReplicaInfo &Catalog::replica(uint64_t id, uint64_t worker) {
    ReplicaInfo *r = find_replica(id, worker);
    if (r == nullptr) fail(TH_ERR_NOT_FOUND, "replica ", id, " is not registered");
    return *r;
}

const ReplicaInfo *Catalog::replica(uint64_t id) const {
    auto it = replicas_.find(id);
    return it == replicas_.end() ? nullptr : it->second;
}

void Catalog::remove_replica(uint64_t id) {
    auto it = replicas_.find(id);
    if (it == replicas_.end()) return;
    ReplicaInfo &r = *it->second;
    replicas_.erase(it);
    unindex_replica(r);
    // Readers still planned onto it stop loading its worker.
    WorkerInfo &w = *r.holder;
    w.active_reads -= std::min(w.active_reads, r.active_reads);
    rerank(w);
    ModelInfo &m = models_.at(r.key.model);
    r.shard->replicas.erase(id);  // r is gone from here on
    prune(m);
}

MutationCheck Catalog::begin_mutation(ReplicaInfo &r, bool rebuilding) {
    const ModelInfo &m = models_.at(r.key.model);
    const VersionInfo &v = m.versions.at(r.key.version);
    MutationCheck out;
    uint32_t others = 0;
    for (const auto &[id, o] : r.shard->replicas) {
        if (id == r.id || !routable(o)) continue;
        (o.complete ? others : out.filling)++;
    }
    out.last_copy = r.complete && v.committed && others == 0 && (rebuilding || is_required(m, v));
    out.active_reads = r.active_reads;
    // The last copy stays routable while its holder copies it (or waits for
    // another to complete); the holder asks again once it has.
    r.mutating = !out.last_copy;
    return out;
}

bool add_reported_chunks(std::vector<uint32_t> &reported, const std::vector<uint32_t> &chunks) {
    bool added = false;
    for (uint32_t c : chunks) {
        if (reported.size() >= kMaxReportedChunks) break;
        if (std::find(reported.begin(), reported.end(), c) != reported.end()) continue;
        reported.push_back(c);
        added = true;
    }
    return added;
}

Reported Catalog::report_mismatch(uint64_t worker, uint64_t id, const std::vector<uint32_t> &chunks) {
    auto it = replicas_.find(id);
    if (it == replicas_.end() || it->second->worker != worker) return Reported::no_such_replica;
    return add_reported_chunks(it->second->reported, chunks) ? Reported::new_chunks : Reported::nothing_new;
}

std::vector<std::pair<uint64_t, std::vector<uint32_t>>> Catalog::reported_chunks(uint64_t worker) const {
    std::vector<std::pair<uint64_t, std::vector<uint32_t>>> out;
    for (const ReplicaInfo *r : workers_.at(worker).held)
        if (!r->reported.empty()) out.emplace_back(r->id, r->reported);
    return out;
}

void Catalog::chunks_match(ReplicaInfo &r, const std::vector<uint32_t> &chunks) {
    std::erase_if(r.reported,
                  [&](uint32_t c) { return std::find(chunks.begin(), chunks.end(), c) != chunks.end(); });
}

std::vector<uint64_t> Catalog::unneeded_owned_copies(uint64_t worker, bool rebuilding) const {
    std::vector<uint64_t> drop;
    if (rebuilding) return drop;
    for (const ReplicaInfo *r : workers_.at(worker).held) {
        if (!r->owned) continue;
        const ModelInfo &m = models_.at(r->key.model);
        if (!is_required(m, m.versions.at(r->key.version))) drop.push_back(r->id);
    }
    return drop;
}

// ---- reads

void Catalog::start_read(uint64_t reader, const ReplicaKey &key, ReplicaInfo &src) {
    end_read({key.model, key.version, key.shard, reader});
    add_read(reader, key, src);
}

void Catalog::add_read(uint64_t reader, const ReplicaKey &key, ReplicaInfo &src) {
    src.holder->active_reads++;
    src.active_reads++;
    rerank(*src.holder);
    reads_[{key.model, key.version, key.shard, reader}].push_back(src.id);
}

void Catalog::drop_reads(uint64_t reader, const ReplicaKey &key, const std::vector<uint64_t> &workers,
                         const std::vector<uint64_t> &replicas) {
    auto it = reads_.find({key.model, key.version, key.shard, reader});
    if (it == reads_.end()) return;
    std::vector<uint64_t> ended;
    auto &sources = it->second;
    auto keep = std::remove_if(sources.begin(), sources.end(), [&](uint64_t id) {
        auto rit = replicas_.find(id);
        bool drop = rit == replicas_.end() ||
                    std::find(workers.begin(), workers.end(), rit->second->worker) != workers.end() ||
                    std::find(replicas.begin(), replicas.end(), id) != replicas.end();
        if (drop) ended.push_back(id);
        return drop;
    });
    sources.erase(keep, sources.end());
    if (sources.empty()) reads_.erase(it);
    for (uint64_t id : ended) end_source(id);
}

void Catalog::end_read(const ReadKey &key) {
    auto it = reads_.find(key);
    if (it == reads_.end()) return;
    std::vector<uint64_t> ids = std::move(it->second);
    reads_.erase(it);
    for (uint64_t id : ids) end_source(id);
}

void Catalog::end_source(uint64_t id) {
    auto rit = replicas_.find(id);
    if (rit == replicas_.end()) return;  // removed meanwhile; its counts went with it
    ReplicaInfo &r = *rit->second;
    if (r.active_reads > 0) r.active_reads--;
    if (r.holder->active_reads > 0) {
        r.holder->active_reads--;
        rerank(*r.holder);
    }
    if (r.mutating && r.active_reads == 0) notify_(wire::EventKind::Drained, r.key.model, r.key.version, id);
}

void Catalog::set_relay(ReplicaInfo &r, uint32_t home, uint32_t depth) {
    unfile(r);
    r.home = static_cast<int32_t>(home);
    r.depth = depth;
    file(r);
}

std::vector<std::pair<const char *, uint64_t>> Catalog::finish_read(uint64_t reader, const ReplicaKey &key, bool ok,
                                                                    const std::vector<SourceRead> &from,
                                                                    uint64_t own_replica) {
    ReplicaInfo *mine = own_replica != 0 ? find_replica(own_replica, reader) : nullptr;
    end_read({key.model, key.version, key.shard, reader});
    std::vector<std::pair<const char *, uint64_t>> by_kind;
    if (VersionInfo *v = find_version(key); v != nullptr && key.shard < v->num_shards) {
        auto &replicas = v->shards[key.shard].replicas;
        for (const SourceRead &sb : from) {
            if (WorkerInfo *w = find_worker(sb.worker)) {
                w->bytes_served += sb.bytes;
                rerank(*w);
            }
            if (auto rit = replicas.find(sb.replica); rit != replicas.end() && rit->second.worker == sb.worker) {
                rit->second.bytes_served += sb.bytes;
                by_kind.emplace_back(replica_kind(rit->second), sb.bytes);
            }
            if (ok) v->reads.push_back({reader, sb.worker, key.shard, sb.bytes});
        }
        constexpr size_t kMaxReads = 4096;
        if (v->reads.size() > kMaxReads) v->reads.erase(v->reads.begin(), v->reads.end() - kMaxReads);
    }
    if (mine != nullptr && ok) {
        mine->complete = true;
        mine->chunks_done = mine->shard->num_chunks;
        rerank(*mine->holder);
    } else if (mine != nullptr) {
        remove_replica(own_replica);
    }
    return by_kind;
}

// ---- indexes

void Catalog::file(ReplicaInfo &r) {
    Candidate c = candidate(r);
    r.rank = load_rank(c, policy_);
    const std::string &dc = r.holder->place.dc;
    r.load_in = &r.shard->by_load[dc];
    r.load_at = r.load_in->insert({r.rank, r.id}).first;
    if (r.complete) {
        r.complete_in = &r.shard->complete_by_load[dc];
        r.complete_at = r.complete_in->insert({r.rank, r.id}).first;
    }
    if (r.home >= 0 && !r.complete) {
        r.relay_rank = relay_rank(c, r.depth, r.shard->stripes, policy_);
        r.shard->relays[{r.holder->place.dc, static_cast<uint32_t>(r.home)}].insert({r.relay_rank, r.id});
    }
}

void Catalog::unfile(ReplicaInfo &r) {
    // A datacenter's index goes with its last entry: while r is filed in it,
    // it is there.
    for (auto [in, at, index] : {std::tuple{&r.load_in, r.load_at, &r.shard->by_load},
                                 std::tuple{&r.complete_in, r.complete_at, &r.shard->complete_by_load}}) {
        if (*in == nullptr) continue;
        (*in)->erase(at);
        if ((*in)->empty()) index->erase(r.holder->place.dc);
        *in = nullptr;
    }
    if (r.home < 0) return;
    if (auto it = r.shard->relays.find({r.holder->place.dc, static_cast<uint32_t>(r.home)}); it != r.shard->relays.end()) {
        it->second.erase({r.relay_rank, r.id});
        if (it->second.empty()) r.shard->relays.erase(it);
    }
}

void Catalog::rerank(WorkerInfo &w) {
    for (ReplicaInfo *r : w.held) {
        // Filed as it was but for its rank (the common case: a source's
        // active reads or bytes served changed): its entries move in place.
        bool relaying = r->home >= 0 && !r->complete;
        if (relaying || r->load_in == nullptr || (r->complete_in != nullptr) != r->complete) {
            unfile(*r);
            file(*r);
            continue;
        }
        r->rank = load_rank(candidate(*r), policy_);
        for (auto [in, at] : {std::pair{r->load_in, &r->load_at}, std::pair{r->complete_in, &r->complete_at}}) {
            if (in == nullptr) continue;
            auto node = in->extract(*at);
            node.value().first = r->rank;
            *at = in->insert(std::move(node)).position;
        }
    }
}

void Catalog::index_replica(ReplicaInfo &r) {
    r.holder->held.push_back(&r);
    const Neighbourhood &place = r.holder->place;
    for (const std::string *key : {&place.host, &place.rack, &place.zone})
        if (!key->empty()) r.shard->nearby[*key].push_back(&r);
    file(r);
}

void Catalog::unindex_replica(ReplicaInfo &r) {
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

}  // namespace th
