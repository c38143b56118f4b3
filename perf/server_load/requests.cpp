#include "requests.hpp"

#include "common/error.hpp"

namespace th_load {

using namespace th::wire;

namespace {

Header header(uint64_t worker, uint64_t request_id) { return Header{request_id, worker, 0}; }

th::Labels labels_of(uint64_t worker) {
    return {{"host", th::str("h", worker / 8)}, {"rack", th::str("r", worker / 128)}, {"dc", "dc0"}};
}

}  // namespace

const char *kind_name(Kind k) {
    switch (k) {
        case Kind::Hello: return "hello";
        case Kind::Publish: return "publish";
        case Kind::Plan: return "plan";
        case Kind::FetchDone: return "fetch_done";
        case Kind::Resolve: return "resolve";
        case Kind::Progress: return "progress";
        case Kind::Heartbeat: return "heartbeat";
    }
    return "?";
}

Requests::Requests(Shape shape) : shape_(std::move(shape)) {
    uint64_t offset = 0;
    for (uint32_t i = 0; i < shape_.tensors; ++i) {
        specs_.push_back({"layers." + std::to_string(i) + ".weight", TH_DTYPE_BFLOAT16,
                          {int64_t(shape_.tensor_bytes / 2)}, shape_.tensor_bytes});
        desc_.places.push_back({0, offset});
        offset += shape_.tensor_bytes;
    }
    // A UCX rkey is some tens of bytes; the sizes matter, not the contents.
    desc_.regions.push_back({0x7f0000000000, offset, std::vector<uint8_t>(40, 7), 0});
    desc_.regions.push_back({0x7f1000000000, 4096, std::vector<uint8_t>(40, 8), 0});
    desc_.ctrl_region = 1;
}

uint64_t Requests::source_of(const uint8_t *reply, size_t size) {
    const PlanReply *p = verify(reply, size)->body_as_PlanReply();
    return p && p->ranges() && p->ranges()->size() > 0 ? p->ranges()->Get(0)->worker_id() : 0;
}

uint32_t Requests::num_chunks() const {
    uint64_t total = shape_.tensor_bytes * shape_.tensors;
    return static_cast<uint32_t>((total + shape_.chunk_bytes - 1) / shape_.chunk_bytes);
}

Bytes Requests::hello(uint64_t worker, uint64_t request_id) const {
    Builder b(512);
    std::vector<uint8_t> ucx_address(120, 3);  // the size of a tcp/sm worker address
    auto body = CreateHello(b, worker, b.CreateString("worker-" + std::to_string(worker)), put_labels(b, shape_.topology ? labels_of(worker) : th::Labels{}),
                            b.CreateVector(ucx_address));
    return finish(b, header(worker, request_id), body);
}

Bytes Requests::publish(uint64_t worker, uint64_t request_id) const {
    Builder b(1024);
    auto body = CreatePublish(b, b.CreateString(shape_.model), shape_.version, 0, 1, shape_.chunk_bytes, put_tensors(b, specs_),
                              put_desc(b, desc_), replica_of(worker), false);
    return finish(b, header(worker, request_id), body);
}

Bytes Requests::plan(uint64_t worker, uint64_t request_id) const {
    Builder b(1024);
    auto model = b.CreateString(shape_.model);
    auto desc = put_desc(b, desc_);
    auto ex = b.CreateVector(std::vector<uint64_t>{});
    auto ex_replicas = b.CreateVector(std::vector<uint64_t>{});
    auto specs = put_tensors(b, specs_);
    auto body = CreatePlanFetch(b, model, UINT64_MAX, 0, 0, 0, desc, replica_of(worker), ex, specs, ex_replicas);
    return finish(b, header(worker, request_id), body);
}

Bytes Requests::fetch_done(uint64_t worker, uint64_t request_id, uint64_t source) const {
    Builder b(256);
    std::vector<flatbuffers::Offset<SourceBytes>> from{
        CreateSourceBytes(b, source, shape_.tensor_bytes * shape_.tensors, replica_of(source))};
    auto body = CreateFetchDone(b, b.CreateString(shape_.model), shape_.version, 0, replica_of(worker), true, b.CreateVector(from),
                                1000);
    return finish(b, header(worker, request_id), body);
}

Bytes Requests::resolve(uint64_t worker, uint64_t request_id) const {
    Builder b(128);
    return finish(b, header(worker, request_id), CreateResolve(b, b.CreateString(shape_.model), UINT64_MAX));
}

Bytes Requests::progress(uint64_t worker, uint64_t request_id) const {
    Builder b(64);
    return finish(b, header(worker, request_id), CreateProgress(b, replica_of(worker), num_chunks()));
}

Bytes Requests::heartbeat(uint64_t worker, uint64_t request_id) const {
    Builder b(64);
    return finish(b, header(worker, request_id), CreateHeartbeat(b));
}

Bytes Requests::make(Kind kind, uint64_t worker, uint64_t request_id) const {
    switch (kind) {
        case Kind::Hello: return hello(worker, request_id);
        case Kind::Publish: return publish(worker, request_id);
        case Kind::Plan: return plan(worker, request_id);
        case Kind::FetchDone: return fetch_done(worker, request_id, 1);
        case Kind::Resolve: return resolve(worker, request_id);
        case Kind::Progress: return progress(worker, request_id);
        case Kind::Heartbeat: return heartbeat(worker, request_id);
    }
    return {};
}

std::string Requests::check(Kind kind, uint64_t worker, uint64_t request_id, const uint8_t *reply, size_t size) const {
    const Envelope *env = nullptr;
    try {
        env = verify(reply, size);
    } catch (const th::Error &e) {
        return e.what();
    }
    if (env->request_id() != request_id) return "reply to another request";
    if (env->body_type() == Body::ErrorReply) {
        const ErrorReply *e = env->body_as_ErrorReply();
        return "error reply: " + (e->message() ? e->message()->str() : std::string("(no message)"));
    }
    Body want = Body::Ack;
    switch (kind) {
        case Kind::Hello: want = Body::HelloReply; break;
        case Kind::Publish: want = Body::PublishReply; break;
        case Kind::Plan: want = Body::PlanReply; break;
        case Kind::Resolve: want = Body::ResolveReply; break;
        case Kind::Heartbeat: want = Body::HeartbeatReply; break;
        case Kind::FetchDone:
        case Kind::Progress: break;
    }
    if (env->body_type() != want) return std::string("unexpected reply type ") + EnumNameBody(env->body_type());
    if (kind == Kind::Plan) {
        const PlanReply *p = env->body_as_PlanReply();
        if (p->ranges() == nullptr || p->ranges()->size() != 1) return "plan without exactly one source";
        uint64_t source = p->ranges()->Get(0)->worker_id();
        if (source == 0 || source == worker) return "plan names no other worker as source";
    }
    if (kind == Kind::Resolve && env->body_as_ResolveReply()->version() != shape_.version) return "resolved another version";
    return {};
}

}  // namespace th_load
