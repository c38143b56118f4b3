// Builders of well-formed requests for unit tests of the wire format and the
// service.
#pragma once

#include <string>
#include <vector>

#include "common/error.hpp"
#include "wire/replica_desc.hpp"
#include "wire/wire.hpp"

namespace th::test {

using namespace th::wire;

inline Header hdr(uint64_t worker, uint64_t req) { return Header{req, worker, 0}; }

// epoch: the newest server epoch the worker has seen.
// left_url: the server a worker failing over left (list mode).
// address: the worker's UCX address.
inline Bytes hello(uint64_t worker, uint64_t req, const Labels &labels = {}, uint64_t epoch = 0,
                   const std::string &left_url = "", uint32_t probe_ms = 0,
                   const std::vector<uint8_t> &addr = {1, 2, 3, 4}) {
    Builder b;
    return finish(b, Header{req, worker, epoch},
                  CreateHello(b, worker, b.CreateString(th::str("w", worker)), put_labels(b, labels), b.CreateVector(addr),
                              left_url.empty() ? 0 : b.CreateString(left_url), probe_ms));
}

inline std::vector<th::TensorSpec> specs(uint64_t bytes_each, int n = 2, th_dtype dt = TH_DTYPE_UINT8) {
    std::vector<th::TensorSpec> out;
    for (int i = 0; i < n; ++i)
        out.push_back({th::str("t", i), dt, {int64_t(bytes_each / th_dtype_size(dt))}, bytes_each});
    return out;
}

inline th::ReplicaDesc desc_for(const std::vector<th::TensorSpec> &ts) {
    th::ReplicaDesc d;
    uint64_t total = 0;
    for (auto &t : ts) {
        d.places.push_back({0, total});
        total += t.nbytes;
    }
    d.regions.push_back({0x10000, total, {9, 9}, 0});
    d.regions.push_back({0x90000, 4096, {8, 8}, 0});
    d.ctrl_region = 1;
    d.ctrl_offset = 0;
    return d;
}

inline Bytes publish(uint64_t worker, uint64_t req, const std::string &model, uint64_t version, uint32_t shard,
                     uint32_t num_shards, const std::vector<th::TensorSpec> &ts, uint64_t replica_id,
                     uint64_t chunk = 4096, bool again = false, bool committed = false) {
    Builder b;
    return finish(b, hdr(worker, req),
                  CreatePublish(b, b.CreateString(model), version, shard, num_shards, chunk, put_tensors(b, ts),
                                put_desc(b, desc_for(ts)), replica_id, false, 0, again, committed));
}

inline Bytes plan(uint64_t worker, uint64_t req, const std::string &model, uint64_t version, uint32_t shard,
                  uint64_t replica_id = 0, const std::vector<th::TensorSpec> *ts = nullptr) {
    Builder b;
    flatbuffers::Offset<wire::ReplicaDesc> d;
    flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::TensorSpec>>> given;
    if (replica_id && ts) d = put_desc(b, desc_for(*ts));
    if (ts) given = put_tensors(b, *ts);
    return finish(b, hdr(worker, req),
                  CreatePlanFetch(b, b.CreateString(model), version, shard, 0, 0, d, replica_id, 0, given));
}

// reader could not read from source.
inline Bytes source_failed(uint64_t reader, uint64_t req, uint64_t source) {
    Builder b;
    return finish(b, hdr(reader, req), CreateSourceFailed(b, source, b.CreateString("test")));
}

// reader's fetch of (model, version, shard) into its replica replica_id (0:
// none) ended; it read bytes from source.
inline Bytes fetch_done(uint64_t reader, uint64_t req, const std::string &model, uint64_t version, uint32_t shard,
                        uint64_t source, uint64_t bytes, uint64_t replica_id = 0, bool ok = true) {
    Builder b;
    std::vector<flatbuffers::Offset<SourceBytes>> from{CreateSourceBytes(b, source, bytes, 0)};
    return finish(b, hdr(reader, req),
                  CreateFetchDone(b, b.CreateString(model), version, shard, replica_id, ok, b.CreateVector(from), 1000));
}

inline Bytes heartbeat(uint64_t worker, uint64_t req) {
    Builder b;
    return finish(b, hdr(worker, req), CreateHeartbeat(b));
}

inline Bytes status(uint64_t req = 1) {
    Builder b;
    return finish(b, hdr(0, req), CreateStatusQuery(b));
}

inline const Envelope *env(const Bytes &b) { return verify(b.data(), b.size()); }

inline int error_code(const Bytes &b) {
    auto *e = env(b);
    return e->body_type() == Body::ErrorReply ? e->body_as_ErrorReply()->code() : 0;
}

inline std::string error_text(const Bytes &b) {
    auto *e = env(b);
    return e->body_type() == Body::ErrorReply && e->body_as_ErrorReply()->message()
               ? e->body_as_ErrorReply()->message()->str()
               : "";
}

}  // namespace th::test
