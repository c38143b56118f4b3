#include "server/status_report.hpp"

#include <algorithm>

namespace th {

namespace fb = flatbuffers;
using namespace wire;

namespace {

fb::Offset<fb::Vector<fb::Offset<WorkerStatus>>> put_workers(Builder &b, const Catalog &catalog, uint64_t now) {
    std::vector<const WorkerInfo *> by_id;
    for (const auto &[id, w] : catalog.workers()) by_id.push_back(&w);
    std::sort(by_id.begin(), by_id.end(), [](auto *x, auto *y) { return x->id < y->id; });
    std::vector<fb::Offset<WorkerStatus>> workers;
    for (const WorkerInfo *w : by_id)
        workers.push_back(CreateWorkerStatus(b, w->id, b.CreateString(w->name), put_labels(b, w->labels), w->bytes_served,
                                             w->active_reads, now - std::min(now, w->last_seen_ms)));
    return b.CreateVector(workers);
}

fb::Offset<fb::Vector<fb::Offset<ShardStatus>>> put_shards(Builder &b, const VersionInfo &v) {
    std::vector<fb::Offset<ShardStatus>> shards;
    for (uint32_t i = 0; i < v.shards.size(); ++i) {
        const ShardInfo &s = v.shards[i];
        std::vector<fb::Offset<ReplicaStatus>> reps;
        for (const auto &[rid, r] : s.replicas)
            reps.push_back(CreateReplicaStatus(b, rid, r.worker, r.chunks_done, r.complete, r.bytes_served, r.publisher,
                                               r.owned, r.mutating, r.active_reads,
                                               static_cast<uint32_t>(r.reported.size()),
                                               r.stalled()));
        shards.push_back(CreateShardStatus(b, i, s.total_bytes, s.num_chunks, b.CreateVector(reps)));
    }
    return b.CreateVector(shards);
}

// Reads done, then those still running, so that the replication tree shows
// as it forms.
fb::Offset<fb::Vector<fb::Offset<ReadStatus>>> put_reads(Builder &b, const Catalog &catalog, const ModelInfo &m,
                                                         const VersionInfo &v) {
    std::vector<fb::Offset<ReadStatus>> reads;
    for (const ReadRecord &r : v.reads) reads.push_back(CreateReadStatus(b, r.reader, r.source, r.shard, r.bytes));
    const auto &running = catalog.reads();
    for (auto it = running.lower_bound({m.name, v.number, 0, 0});
         it != running.end() && std::get<0>(it->first) == m.name && std::get<1>(it->first) == v.number; ++it) {
        for (uint64_t id : it->second) {
            const ReplicaInfo *source = catalog.replica(id);
            if (source == nullptr) continue;
            ReadStatusBuilder rs(b);
            rs.add_reader(std::get<3>(it->first));
            rs.add_source(source->worker);
            rs.add_shard(std::get<2>(it->first));
            rs.add_active(true);
            reads.push_back(rs.Finish());
        }
    }
    return b.CreateVector(reads);
}

}  // namespace

Bytes status_reply(const Catalog &catalog, const Header &h, uint64_t now_ms, uint64_t started_ms) {
    Builder b(4096);
    auto workers = put_workers(b, catalog, now_ms);
    std::vector<fb::Offset<ModelStatus>> models;
    for (const auto &[name, m] : catalog.models()) {
        std::vector<fb::Offset<VersionStatus>> versions;
        for (const auto &[num, v] : m.versions) {
            auto shards = put_shards(b, v);
            auto reads = put_reads(b, catalog, m, v);
            versions.push_back(CreateVersionStatus(b, num, v.num_shards, v.committed, m.pins.count(num) > 0,
                                                   catalog.is_required(m, v), shards, reads));
        }
        models.push_back(CreateModelStatus(b, b.CreateString(name), m.latest.value_or(0), m.latest.has_value(),
                                           b.CreateVector(versions)));
    }
    return finish(b, h, CreateStatusReply(b, h.epoch, now_ms - started_ms, workers, b.CreateVector(models)));
}

}  // namespace th
