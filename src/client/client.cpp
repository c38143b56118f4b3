#include "client/client.hpp"

#include <unistd.h>

#include <random>

#include "common/error.hpp"
#include "common/log.hpp"

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

}  // namespace

Replica::~Replica() = default;

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
    ucx_ = std::make_unique<UcxWorker>();
    ctrl_ = std::make_unique<ControlPage>(*ucx_);
    rpc_ = std::make_unique<RpcClient>(cfg_.server_url);
    hello(Deadline(cfg_.timeout_ms));
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
            release(*r);
        } catch (const std::exception &e) {
            TH_LOG(Info, "releasing replica ", r->id_, " at shutdown: ", e.what());
        }
        r->client_ = nullptr;
    }
    try {
        call([](Builder &b, const Header &h) { return wire::finish(b, h, CreateGoodbye(b)); },
             Deadline(std::min<uint32_t>(cfg_.timeout_ms, 1000)));
    } catch (const std::exception &e) {
        TH_LOG(Info, "goodbye to the server failed: ", e.what());
    }
    rpc_.reset();
    ctrl_.reset();
    ucx_.reset();
}

Header Client::header() {
    Header h;
    h.request_id = next_request_++;
    h.worker_id = worker_id_;
    h.epoch = epoch_.load();
    return h;
}

Bytes Client::call_raw(const std::function<Bytes(Builder &, const Header &)> &build, const Deadline &deadline) {
    for (int attempt = 0;; ++attempt) {
        Builder b(512);
        Bytes reply = rpc_->call(build(b, header()), deadline);
        const Envelope *env = verify(reply.data(), reply.size());
        if (env->body_type() != Body::ErrorReply) return reply;
        const ErrorReply *e = env->body_as_ErrorReply();
        if (e->unknown_worker() && attempt == 0) {
            TH_LOG(Warn, "the server (", rpc_->url(), ") does not know this worker; registering again");
            reregister(deadline);
            continue;
        }
        th_status code = static_cast<th_status>(e->code());
        if (code >= 0 || code < TH_ERR_INTERNAL || e->unknown_worker()) code = e->unknown_worker() ? TH_ERR_UNAVAILABLE : TH_ERR_PROTOCOL;
        throw Error(code, e->message() ? e->message()->str() : "server error without message");
    }
}

void Client::hello(const Deadline &deadline) {
    Builder b(512);
    Header h = header();
    auto body = CreateHello(b, worker_id_, b.CreateString(cfg_.worker_name), put_labels(b, cfg_.labels),
                            b.CreateVector(ucx_->address()));
    Bytes reply = rpc_->call(finish(b, h, body), deadline);
    const Envelope *env = verify(reply.data(), reply.size());
    if (env->body_type() == Body::ErrorReply) {
        const ErrorReply *e = env->body_as_ErrorReply();
        throw Error(static_cast<th_status>(e->code()), e->message() ? e->message()->str() : "registration refused");
    }
    if (env->body_type() != Body::HelloReply) fail(TH_ERR_PROTOCOL, "unexpected reply to Hello");
    epoch_ = env->body_as_HelloReply()->server_epoch();
    registrations_++;
}

// After a server restart (or after being reported unreachable) the server has
// forgotten us: introduce ourselves again and re-declare every complete replica,
// so that the server rebuilds its view from the workers, which hold the truth.
void Client::reregister(const Deadline &deadline) {
    std::lock_guard lk(reg_mu_);
    hello(deadline);
    for (auto &[id, r] : held_)
        if (r->complete_) send_publish(*r, deadline);
}

void Client::heartbeat_loop() {
    std::unique_lock lk(hb_mu_);
    bool warned = false;
    while (!hb_cv_.wait_for(lk, std::chrono::milliseconds(cfg_.heartbeat_ms), [this] { return stop_; })) {
        lk.unlock();
        try {
            call([](Builder &b, const Header &h) { return finish(b, h, CreateHeartbeat(b)); },
                 Deadline(cfg_.heartbeat_ms * 2));
            if (warned) TH_LOG(Warn, "server ", cfg_.server_url, " answers heartbeats again");
            warned = false;
        } catch (const std::exception &e) {
            if (!warned) TH_LOG(Warn, "heartbeat to ", cfg_.server_url, " failed: ", e.what());
            warned = true;
        }
        lk.lock();
    }
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
        RegionRef reg = ucx_->register_memory(buf.data, buf.spec.nbytes, buf.kind);
        uint32_t idx = 0;
        while (idx < r->regions_.size() && r->regions_[idx] != reg) ++idx;
        if (idx == r->regions_.size()) r->regions_.push_back(reg);
        r->desc_.places.push_back({idx, reinterpret_cast<uintptr_t>(buf.data) - reg->base});
    }
    r->ctrl_ = ctrl_->acquire();
    r->regions_.push_back(ctrl_->region());
    r->desc_.ctrl_region = static_cast<uint32_t>(r->regions_.size() - 1);
    r->desc_.ctrl_offset = r->ctrl_.offset;
    for (const RegionRef &reg : r->regions_)
        r->desc_.regions.push_back({reg->base, reg->length, reg->rkey, static_cast<uint8_t>(reg->kind)});
    return r.get();
}

void Client::send_publish(const Replica &r, const Deadline &deadline) {
    std::vector<TensorSpec> specs;
    for (const Buffer &b : r.buffers_) specs.push_back(b.spec);
    Bytes reply = call(
        [&](Builder &b, const Header &h) {
            auto body = CreatePublish(b, b.CreateString(r.model_), r.version_, r.shard_, r.num_shards_, r.chunk_bytes_,
                                      put_tensors(b, specs), put_desc(b, r.desc_), r.id_);
            return finish(b, h, body);
        },
        deadline);
    if (GetEnvelope(reply.data())->body_type() != Body::PublishReply) fail(TH_ERR_PROTOCOL, "unexpected reply to Publish");
}

std::unique_ptr<Replica> Client::publish(const std::string &model, uint64_t version, uint32_t shard,
                                         uint32_t num_shards, uint64_t chunk_bytes, std::vector<Buffer> buffers) {
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
    r->ctrl_.word->chunks_done.store(layout.num_chunks());
    r->complete_ = true;
    try {
        send_publish(*r, Deadline(cfg_.timeout_ms));
    } catch (...) {
        ctrl_->release(r->ctrl_.word);
        throw;
    }
    remember(r.get());
    TH_LOG(Info, "published '", model, "' v", version, " shard ", shard, "/", num_shards, " (", layout.total_bytes(),
           " bytes)");
    return r;
}

void Client::release(Replica &r) {
    forget(&r);
    ctrl_->release(r.ctrl_.word);  // readers still on it see the generation change
    Deadline d(cfg_.timeout_ms);
    call([&](Builder &b, const Header &h) { return finish(b, h, CreateRelease(b, r.id_)); }, d);
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

std::string query_status(const std::string &url, uint32_t timeout_ms) {
    RpcClient rpc(url);
    Builder b(64);
    Header h;
    h.request_id = 1;
    Bytes reply = rpc.call(wire::finish(b, h, CreateStatusQuery(b)), Deadline(timeout_ms));
    const Envelope *env = verify(reply.data(), reply.size());
    if (env->body_type() == Body::ErrorReply) {
        const ErrorReply *e = env->body_as_ErrorReply();
        throw Error(static_cast<th_status>(e->code()), e->message() ? e->message()->str() : "status query refused");
    }
    if (env->body_type() != Body::StatusReply) fail(TH_ERR_PROTOCOL, "unexpected reply to StatusQuery");
    return status_to_json(*env->body_as_StatusReply());
}

FetchResult Client::fetch(const FetchRequest &req, std::vector<Buffer> dst, bool serve) {
    Fetch f(*this, req, std::move(dst), serve);
    FetchResult r = f.run();
    TH_LOG(Info, "fetched '", req.model, "' v", r.version, " shard ", req.shard);
    return r;
}

}  // namespace th
