#include "control.hpp"

#include <algorithm>
#include <chrono>

#include "common/error.hpp"
#include "wire/replica_desc.hpp"

namespace th::sim {

using namespace th::wire;

namespace {

std::vector<th::TensorSpec> layout_of(uint64_t total_bytes) {
    return {{"weights", TH_DTYPE_UINT8, {static_cast<int64_t>(total_bytes)}, total_bytes}};
}

// Where a simulated worker's buffers "are": one region for the weights, one
// for the control word. Readers never dereference them.
th::ReplicaDesc desc_of(uint64_t total_bytes) {
    th::ReplicaDesc d;
    d.regions.push_back({0x100000, total_bytes, {1, 2, 3, 4}, 0});
    d.regions.push_back({0x10, 4096, {5, 6, 7, 8}, 0});
    d.places.push_back({0, 0});
    d.ctrl_region = 1;
    return d;
}

const Envelope *reply_of(const Bytes &reply, Body expected, const char *what) {
    const Envelope *env = verify(reply.data(), reply.size());
    if (env->body_type() == Body::ErrorReply) throw_reply_error(*env->body_as_ErrorReply(), what);
    if (env->body_type() != expected) fail(TH_ERR_PROTOCOL, "unexpected reply to ", what);
    return env;
}

}  // namespace

uint64_t ControlStats::total_messages() const {
    uint64_t n = 0;
    for (const auto &[type, count] : messages) n += count;
    return n;
}

Control::Control(std::function<uint64_t()> now_ms, uint32_t max_readers_per_source, uint32_t stripes)
    : service_([&] {
          ServiceConfig cfg;
          cfg.now_ms = std::move(now_ms);
          cfg.policy.max_readers_per_source = max_readers_per_source;
          cfg.policy.stripes = stripes;
          return cfg;
      }()) {}

// A worker says Hello knowing no epoch yet, then sends the epoch the reply
// told it (a Hello carrying the server's own epoch would mean a takeover).
Header Control::header(uint64_t worker, bool hello) {
    return Header{++next_request_[worker], worker, hello ? 0 : service_.epoch()};
}

Bytes Control::call(const char *type, uint64_t worker, const std::function<Bytes(Builder &, const Header &)> &build) {
    Builder b(256);
    Bytes request = build(b, header(worker, std::string(type) == "Hello"));
    auto started = std::chrono::steady_clock::now();
    Bytes reply = service_.handle(request.data(), request.size());
    double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    stats_.messages[type]++;
    stats_.handle_seconds += took;
    if (std::string(type) == "PlanFetch") {
        stats_.plans++;
        stats_.plan_seconds += took;
        stats_.plan_max_seconds = std::max(stats_.plan_max_seconds, took);
    }
    return reply;
}

void Control::hello(uint64_t worker, const Labels &labels) {
    Bytes reply = call("Hello", worker, [&](Builder &b, const Header &h) {
        std::vector<uint8_t> address = {1, 2, 3, 4, 5, 6, 7, 8};
        return finish(b, h, CreateHello(b, worker, b.CreateString(str("w", worker)), put_labels(b, labels),
                                        b.CreateVector(address)));
    });
    reply_of(reply, Body::HelloReply, "Hello");
}

void Control::publish(uint64_t worker, uint64_t version, uint64_t replica, uint64_t total_bytes, uint64_t chunk_bytes,
                      bool owned) {
    total_bytes_[version] = total_bytes;
    Bytes reply = call("Publish", worker, [&](Builder &b, const Header &h) {
        return finish(b, h, CreatePublish(b, b.CreateString(kModel), version, 0, 1, chunk_bytes,
                                          put_tensors(b, layout_of(total_bytes)), put_desc(b, desc_of(total_bytes)), replica,
                                          owned));
    });
    reply_of(reply, Body::PublishReply, "Publish");
}

bool Control::plan(uint64_t worker, uint64_t version, uint64_t replica, uint32_t first, uint32_t count,
                   const std::vector<uint64_t> &exclude, const std::vector<uint64_t> &exclude_replicas, PlanMode mode,
                   Plan *out, std::string *error) {
    uint64_t total = total_bytes_.at(version);
    Bytes reply = call("PlanFetch", worker, [&](Builder &b, const Header &h) {
        flatbuffers::Offset<wire::ReplicaDesc> desc;
        if (replica != 0) desc = put_desc(b, desc_of(total));
        auto ex = b.CreateVector(exclude);
        auto ex_replicas = b.CreateVector(exclude_replicas);
        auto specs = put_tensors(b, layout_of(total));
        return finish(b, h, CreatePlanFetch(b, b.CreateString(kModel), version, 0, first, count, desc, replica, ex, specs,
                                            ex_replicas, mode));
    });
    const Envelope *env = verify(reply.data(), reply.size());
    if (env->body_type() == Body::ErrorReply) {
        const ErrorReply *e = env->body_as_ErrorReply();
        if (e->code() != TH_ERR_UNAVAILABLE) throw_reply_error(*e, "PlanFetch");
        *error = e->message() ? e->message()->str() : "no source";
        return false;
    }
    if (env->body_type() != Body::PlanReply) fail(TH_ERR_PROTOCOL, "unexpected reply to PlanFetch");
    const PlanReply *p = env->body_as_PlanReply();
    if (p->ranges() == nullptr || p->ranges()->size() == 0) fail(TH_ERR_PROTOCOL, "plan without sources");
    out->ranges.clear();
    for (const SourceRange *r : *p->ranges())
        out->ranges.push_back({r->worker_id(), r->replica_id(), r->complete(), r->first_chunk(), r->num_chunks()});
    out->stripes = std::max<uint32_t>(p->stripes(), 1);
    return true;
}

void Control::fetch_done(uint64_t worker, uint64_t version, uint64_t replica,
                         const std::map<std::pair<uint64_t, uint64_t>, uint64_t> &bytes_from, uint64_t duration_us) {
    Bytes reply = call("FetchDone", worker, [&](Builder &b, const Header &h) {
        std::vector<flatbuffers::Offset<SourceBytes>> from;
        for (const auto &[src, n] : bytes_from) from.push_back(CreateSourceBytes(b, src.first, n, src.second));
        return finish(b, h, CreateFetchDone(b, b.CreateString(kModel), version, 0, replica, true, b.CreateVector(from),
                                            duration_us));
    });
    reply_of(reply, Body::Ack, "FetchDone");
}

void Control::source_failed(uint64_t worker, uint64_t failed_worker) {
    Bytes reply = call("SourceFailed", worker, [&](Builder &b, const Header &h) {
        return finish(b, h, CreateSourceFailed(b, failed_worker, b.CreateString("GET failed (simulated)")));
    });
    reply_of(reply, Body::Ack, "SourceFailed");
}

MutationState Control::begin_mutation(uint64_t worker, uint64_t replica) {
    Bytes reply = call("BeginMutation", worker,
                       [&](Builder &b, const Header &h) { return finish(b, h, CreateBeginMutation(b, replica)); });
    const BeginMutationReply *r = reply_of(reply, Body::BeginMutationReply, "BeginMutation")->body_as_BeginMutationReply();
    return {r->active_reads(), r->last_copy(), r->filling()};
}

void Control::release(uint64_t worker, uint64_t replica) {
    Bytes reply =
        call("Release", worker, [&](Builder &b, const Header &h) { return finish(b, h, CreateRelease(b, replica)); });
    reply_of(reply, Body::Ack, "Release");
}

void Control::goodbye(uint64_t worker) {
    Bytes reply = call("Goodbye", worker, [&](Builder &b, const Header &h) { return finish(b, h, CreateGoodbye(b)); });
    reply_of(reply, Body::Ack, "Goodbye");
}

void Control::heartbeat(uint64_t worker) {
    Bytes reply = call("Heartbeat", worker, [&](Builder &b, const Header &h) { return finish(b, h, CreateHeartbeat(b)); });
    reply_of(reply, Body::HeartbeatReply, "Heartbeat");
}

}  // namespace th::sim
