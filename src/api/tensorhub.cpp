// The extern "C" boundary: argument checks, conversion to the C++ core, and
// every exception turned into a status code plus th_last_error().
#include "tensorhub/tensorhub.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "client/client.hpp"
#include "client/queries.hpp"
#include "common/error.hpp"
#include "common/fork_guard.hpp"
#include "common/log.hpp"
#include "common/stripes.hpp"
#include "server/server.hpp"
#include "wire/auth.hpp"

struct th_server {
    std::unique_ptr<th::Server> impl;
    std::string metrics_url;
};

struct th_client {
    std::unique_ptr<th::Client> impl;
};

struct th_replica {
    std::unique_ptr<th::Replica> impl;
};

struct th_cancel {
    std::shared_ptr<th::CancelToken> token = std::make_shared<th::CancelToken>();
};

namespace {

using th::fail;

// Config structs grow by appending fields: read what the caller's struct has,
// defaults for the rest.
// Defaults into the caller's struct, limited to the size the caller has: a
// program built against an older, smaller struct is never written past.
template <typename T, typename Defaults>
void init_config(T *cfg, size_t size, Defaults defaults) {
    if (cfg == nullptr || size < sizeof(size_t)) return;
    T full{};
    defaults(full);
    full.struct_size = std::min(size, sizeof(T));
    std::memset(static_cast<void *>(cfg), 0, size);
    std::memcpy(static_cast<void *>(cfg), &full, std::min(size, sizeof(T)));
}

template <typename T>
T read_config(const T *cfg, void (*init)(T *, size_t), const char *what) {
    T out;
    init(&out, sizeof out);
    if (cfg == nullptr) fail(TH_ERR_INVALID_ARG, what, " is NULL");
    const size_t given = cfg->struct_size;
    if (given < sizeof(size_t) || given > (1u << 16))
        fail(TH_ERR_INVALID_ARG, what, ".struct_size is ", given, "; call ", what, "_init first");
    std::memcpy(&out, cfg, std::min(sizeof(T), given));
    out.struct_size = sizeof(T);
    return out;
}

// Checked before the call does anything, so that a bad stats struct never
// turns a done publish or fetch into a failure.
void check_stats(const th_sync_stats *out) {
    if (out == nullptr) return;
    if (out->struct_size < sizeof(size_t) || out->struct_size > (1u << 16))
        fail(TH_ERR_INVALID_ARG, "th_sync_stats.struct_size is ", out->struct_size, "; call th_sync_stats_init first");
}

// Fills the caller's th_sync_stats, only as far as the struct it has.
void write_stats(th_sync_stats *out, const th::SyncStats &st) {
    if (out == nullptr) return;
    const size_t given = out->struct_size;
    th_sync_stats full{};
    full.struct_size = std::min(given, sizeof full);
    full.version = st.version;
    full.bytes = st.bytes;
    full.seconds = st.seconds;
    full.gbps = st.gbps();
    full.sources = st.sources;
    full.replans = st.replans;
    full.failed_sources = st.failed_sources;
    full.chunks = st.chunks;
    full.bytes_from_publisher = st.bytes_from_publisher;
    full.bytes_from_replicas = st.bytes_from_replicas;
    full.checksum_mismatches = st.checksum_mismatches;
    full.bytes_one_sided = st.bytes_one_sided;
    full.bytes_waited = st.bytes_waited;
    full.bytes_kept = st.bytes_kept;
    full.server_seconds = st.server_seconds;
    std::memcpy(static_cast<void *>(out), &full, std::min(given, sizeof full));
}

// What th_fetch and th_fetch_ranges share of a th_fetch_config: model,
// version, shard, deadline, verification and progress (checked first).
th::FetchRequest fetch_request(const th_fetch_config &c) {
    if (c.model == nullptr) fail(TH_ERR_INVALID_ARG, "model is NULL");
    check_stats(c.stats);
    uint32_t verify = 0;
    std::memcpy(&verify, &c.verify, sizeof verify);
    if (verify > TH_VERIFY_ALL) fail(TH_ERR_INVALID_ARG, "unknown verify mode ", verify);
    th::FetchRequest req;
    req.model = c.model;
    req.version = c.version;
    req.shard = c.shard;
    req.timeout_ms = c.timeout_ms;
    req.verify = static_cast<th_verify>(verify);
    if (c.cancel) req.cancel = c.cancel->token.get();
    if (c.progress) {
        auto progress = c.progress;
        void *user_data = c.progress_user_data;
        req.progress = [progress, user_data](uint64_t done, uint64_t total) { progress(done, total, user_data); };
        req.progress_interval_ms = c.progress_interval_ms;
    }
    return req;
}

std::vector<th::Buffer> buffers(const th_tensor *tensors, size_t n) {
    if (tensors == nullptr || n == 0) fail(TH_ERR_INVALID_ARG, "no tensors given");
    std::vector<th::Buffer> out;
    out.reserve(n);
    for (size_t i = 0; i < n; ++i) {
        const th_tensor &t = tensors[i];
        if (t.name == nullptr) fail(TH_ERR_INVALID_ARG, "tensor ", i, " has no name");
        if (t.ndim > TH_MAX_DIMS) fail(TH_ERR_INVALID_ARG, "tensor '", t.name, "' has ndim ", t.ndim, " > ", TH_MAX_DIMS);
        // Read the enums as raw numbers: a C caller may pass any int.
        uint32_t dtype = 0, kind = 0;
        std::memcpy(&dtype, &t.dtype, sizeof dtype);
        std::memcpy(&kind, &t.mem_kind, sizeof kind);
        if (!th::dtype_known(dtype)) fail(TH_ERR_INVALID_ARG, "tensor '", t.name, "' has unknown dtype ", dtype);
        if (kind != TH_MEM_HOST && kind != TH_MEM_CUDA)
            fail(TH_ERR_INVALID_ARG, "tensor '", t.name, "' has unknown memory kind ", kind);
        th::Buffer b;
        b.spec.name = t.name;
        b.spec.dtype = static_cast<th_dtype>(dtype);
        b.spec.shape.assign(t.shape, t.shape + t.ndim);
        b.spec.nbytes = t.nbytes;
        b.data = t.data;
        b.kind = static_cast<th_mem_kind>(kind);
        out.push_back(std::move(b));
    }
    return out;
}

char *copy_string(const std::string &s) {
    char *out = static_cast<char *>(std::malloc(s.size() + 1));
    if (out == nullptr) throw std::bad_alloc();
    std::memcpy(out, s.c_str(), s.size() + 1);
    return out;
}

}  // namespace

extern "C" {

const char *th_status_str(th_status status) {
    int32_t raw = 0;
    std::memcpy(&raw, &status, sizeof raw);
    if (raw > 0 || raw < th::kLowestStatus) return "unknown status";
    switch (status) {
        case TH_OK: return "ok";
        case TH_ERR_INVALID_ARG: return "invalid argument";
        case TH_ERR_NOT_FOUND: return "not found";
        case TH_ERR_NOT_COMMITTED: return "version not committed";
        case TH_ERR_LAYOUT_MISMATCH: return "layout mismatch";
        case TH_ERR_CONFLICT: return "conflict";
        case TH_ERR_TIMEOUT: return "timed out";
        case TH_ERR_UNAVAILABLE: return "unavailable";
        case TH_ERR_TRANSPORT: return "transport error";
        case TH_ERR_PROTOCOL: return "protocol error";
        case TH_ERR_NO_MEMORY: return "out of memory";
        case TH_ERR_CLOSED: return "closed";
        case TH_ERR_UNSUPPORTED: return "unsupported";
        case TH_ERR_INTERNAL: return "internal error";
        case TH_ERR_RETAINED: return "required version retained";
        case TH_ERR_AUTH: return "authentication failed";
        case TH_ERR_CANCELED: return "canceled";
    }
    return "unknown status";
}

const char *th_last_error(void) { return th::last_error(); }

th_status th_cancel_create(th_cancel **out) { return th_cancel_create_linked(nullptr, out); }

th_status th_cancel_create_linked(const th_cancel *parent, th_cancel **out) {
    return th::guard([&] {
        if (out == nullptr) fail(TH_ERR_INVALID_ARG, "out is NULL");
        *out = new th_cancel;
        if (parent != nullptr) (*out)->token->parent = parent->token;
    });
}

void th_cancel_signal(th_cancel *cancel) {
    if (cancel != nullptr) cancel->token->own.store(true, std::memory_order_release);
}

int th_cancel_signalled(const th_cancel *cancel) { return cancel != nullptr && cancel->token->signalled() ? 1 : 0; }

void th_cancel_destroy(th_cancel *cancel) { delete cancel; }

void th_free(void *ptr) { std::free(ptr); }

void th_set_log_handler(th_log_fn fn, void *user_data) { th::set_log_handler(fn, user_data); }

th_status th_set_log_level(th_log_level level) {
    return th::guard([&] {
        int raw = 0;
        std::memcpy(&raw, &level, sizeof raw);
        if (raw < TH_LOG_ERROR || raw > TH_LOG_DEBUG) fail(TH_ERR_INVALID_ARG, "unknown log level ", raw);
        th::set_log_level(static_cast<th::LogLevel>(raw));
    });
}

th_log_level th_get_log_level(void) { return static_cast<th_log_level>(th::log_level()); }

const char *th_version(void) {
#define TH_STR2(x) #x
#define TH_STR(x) TH_STR2(x)
    return TH_STR(TH_VERSION_MAJOR) "." TH_STR(TH_VERSION_MINOR) "." TH_STR(TH_VERSION_PATCH);
}

uint32_t th_version_number(void) { return TH_VERSION_NUMBER; }

size_t th_dtype_size(th_dtype dtype) {
    uint32_t raw = 0;
    std::memcpy(&raw, &dtype, sizeof raw);
    if (!th::dtype_known(raw)) return 0;
    switch (dtype) {
        case TH_DTYPE_UINT8:
        case TH_DTYPE_INT8:
        case TH_DTYPE_BOOL:
        case TH_DTYPE_FLOAT8_E4M3:
        case TH_DTYPE_FLOAT8_E5M2: return 1;
        case TH_DTYPE_INT16:
        case TH_DTYPE_UINT16:
        case TH_DTYPE_FLOAT16:
        case TH_DTYPE_BFLOAT16: return 2;
        case TH_DTYPE_INT32:
        case TH_DTYPE_UINT32:
        case TH_DTYPE_FLOAT32: return 4;
        case TH_DTYPE_INT64:
        case TH_DTYPE_UINT64:
        case TH_DTYPE_FLOAT64: return 8;
    }
    return 0;
}

void th_server_config_init(th_server_config *cfg, size_t size) {
    init_config(cfg, size, [](th_server_config &c) {
        c.listen_url = TH_DEFAULT_LISTEN_URL;
        c.lease_ms = TH_DEFAULT_LEASE_MS;
        c.max_readers_per_source = TH_DEFAULT_MAX_READERS_PER_SOURCE;
        c.stripes = TH_DEFAULT_STRIPES;
        c.etcd_prefix = TH_DEFAULT_ETCD_PREFIX;
        c.etcd_lease_ms = TH_DEFAULT_ETCD_LEASE_MS;
    });
}

th_status th_server_create(th_server **out, const th_server_config *cfg) {
    return th::guard([&] {
        th::check_not_forked();
        if (out == nullptr) fail(TH_ERR_INVALID_ARG, "out is NULL");
        *out = nullptr;
        th_server_config c = read_config(cfg, th_server_config_init, "th_server_config");
        if (c.listen_url == nullptr || *c.listen_url == '\0') fail(TH_ERR_INVALID_ARG, "listen_url is empty");
        if (c.lease_ms < 10) fail(TH_ERR_INVALID_ARG, "lease_ms must be at least 10");
        if (c.max_readers_per_source == 0) fail(TH_ERR_INVALID_ARG, "max_readers_per_source must be positive");
        if (c.stripes > th::kMaxStripes)
            fail(TH_ERR_INVALID_ARG, "stripes must be 0 (automatic) to ", th::kMaxStripes, ", got ", c.stripes);
        th::ServiceConfig sc;
        sc.lease_ms = c.lease_ms;
        sc.heartbeat_ms = std::max<uint32_t>(c.lease_ms / 10, 1);
        sc.policy.max_readers_per_source = c.max_readers_per_source;
        sc.policy.stripes = c.stripes;
        sc.standby = c.standby != 0;
        th::LeadershipConfig etcd;
        if (c.etcd_endpoints != nullptr && *c.etcd_endpoints != '\0') {
            etcd.endpoints = c.etcd_endpoints;
            etcd.prefix = c.etcd_prefix ? c.etcd_prefix : "";
            etcd.lease_ms = c.etcd_lease_ms;
            etcd.advertise_url = c.advertise_url ? c.advertise_url : "";
        }
        auto s = std::make_unique<th_server>();
        s->impl = std::make_unique<th::Server>(c.listen_url, sc, th::wire::cluster_token(c.token),
                                               c.metrics_url ? c.metrics_url : "", etcd);
        s->metrics_url = s->impl->metrics_url();
        th::note_threads_started();
        *out = s.release();
    });
}

const char *th_server_url(const th_server *server) { return server ? server->impl->url().c_str() : ""; }

const char *th_server_metrics_url(const th_server *server) { return server ? server->metrics_url.c_str() : ""; }

void th_server_destroy(th_server *server) {
    // In a forked child its threads do not exist: joining them would hang.
    if (server != nullptr && th::in_forked_child()) return;  // leaked on purpose
    delete server;
}

void th_client_config_init(th_client_config *cfg, size_t size) {
    init_config(cfg, size, [](th_client_config &c) {
        c.timeout_ms = TH_DEFAULT_TIMEOUT_MS;
        c.heartbeat_ms = TH_DEFAULT_HEARTBEAT_MS;
        c.chunk_timeout_ms = TH_DEFAULT_CHUNK_TIMEOUT_MS;
        c.max_inflight = TH_DEFAULT_MAX_INFLIGHT;
        c.retention = TH_DEFAULT_RETENTION;
        c.mutation_wait_ms = TH_DEFAULT_MUTATION_WAIT_MS;
        c.spill_pool_bytes = TH_DEFAULT_SPILL_POOL_BYTES;
        c.spill_ahead = TH_DEFAULT_SPILL_AHEAD;
        c.copy_threads = TH_DEFAULT_COPY_THREADS;
    });
}

th_status th_client_create(th_client **out, const th_client_config *cfg) {
    return th::guard([&] {
        th::check_not_forked();
        if (out == nullptr) fail(TH_ERR_INVALID_ARG, "out is NULL");
        *out = nullptr;
        th_client_config c = read_config(cfg, th_client_config_init, "th_client_config");
        if (c.server_url == nullptr || *c.server_url == '\0') fail(TH_ERR_INVALID_ARG, "server_url is empty");
        th::ClientConfig cc;
        cc.server_url = c.server_url;
        if (c.worker_name) cc.worker_name = c.worker_name;
        if (c.labels) cc.labels = th::parse_labels(c.labels);
        cc.timeout_ms = c.timeout_ms;
        cc.heartbeat_ms = c.heartbeat_ms;
        cc.chunk_timeout_ms = c.chunk_timeout_ms;
        cc.max_inflight = c.max_inflight;
        uint32_t retention = 0;
        std::memcpy(&retention, &c.retention, sizeof retention);
        if (retention > TH_RETAIN_FAIL) fail(TH_ERR_INVALID_ARG, "unknown retention policy ", retention);
        cc.retention = static_cast<th_retention>(retention);
        cc.mutation_wait_ms = c.mutation_wait_ms;
        cc.token = th::wire::cluster_token(c.token);
        cc.spill_pool_bytes = c.spill_pool_bytes;
        if (c.spill_ahead > 1) fail(TH_ERR_INVALID_ARG, "spill_ahead must be 0 or 1, not ", c.spill_ahead);
        cc.spill_ahead = c.spill_ahead == 1;
        if (c.copy_threads < 1 || c.copy_threads > TH_MAX_COPY_THREADS)
            fail(TH_ERR_INVALID_ARG, "copy_threads must be 1 to ", TH_MAX_COPY_THREADS, ", not ", c.copy_threads);
        cc.copy_threads = c.copy_threads;
        auto cl = std::make_unique<th_client>();
        cl->impl = std::make_unique<th::Client>(cc);
        th::note_threads_started();
        *out = cl.release();
    });
}

void th_client_destroy(th_client *client) {
    // In a forked child its threads do not exist: joining them would hang.
    if (client != nullptr && th::in_forked_child()) return;  // leaked on purpose
    delete client;
}

uint64_t th_client_worker_id(const th_client *client) { return client ? client->impl->worker_id() : 0; }

void th_sync_stats_init(th_sync_stats *stats, size_t size) {
    init_config(stats, size, [](th_sync_stats &) {});
}

void th_publish_config_init(th_publish_config *cfg, size_t size) {
    init_config(cfg, size, [](th_publish_config &c) {
        c.num_shards = TH_DEFAULT_NUM_SHARDS;
        c.chunk_bytes = TH_DEFAULT_CHUNK_BYTES;
        c.checksums = TH_DEFAULT_CHECKSUMS;
    });
}

th_status th_publish(th_client *client, const th_publish_config *cfg, const th_tensor *tensors, size_t n,
                     th_replica **out) {
    return th::guard([&] {
        th::check_not_forked();
        if (out == nullptr) fail(TH_ERR_INVALID_ARG, "out is NULL");
        *out = nullptr;
        if (client == nullptr) fail(TH_ERR_INVALID_ARG, "client is NULL");
        th_publish_config c = read_config(cfg, th_publish_config_init, "th_publish_config");
        if (c.model == nullptr) fail(TH_ERR_INVALID_ARG, "model is NULL");
        check_stats(c.stats);
        auto r = std::make_unique<th_replica>();
        th::SyncStats st;
        r->impl = client->impl->publish(c.model, c.version, c.shard, c.num_shards, c.chunk_bytes, buffers(tensors, n), &st,
                                        c.checksums != 0);
        *out = r.release();
        write_stats(c.stats, st);
    });
}

uint64_t th_replica_version(const th_replica *replica) { return replica ? replica->impl->version() : 0; }

int th_replica_withdrawn(const th_replica *replica) { return replica && replica->impl->withdrawn() ? 1 : 0; }

th_status th_replica_release(th_replica *replica) {
    if (replica == nullptr) return TH_OK;
    if (th::in_forked_child()) return th::guard([] { th::check_not_forked(); });  // leaked: see th_client_destroy
    std::unique_ptr<th_replica> owned(replica);
    th_status st = th::guard([&] {
        th::check_not_forked();
        th::Holdings *h = owned->impl->holder();
        if (h != nullptr) h->release(*owned->impl);
    });
    // Refused by the retention policy: the replica still serves; the caller
    // keeps the handle.
    if (st == TH_ERR_RETAINED) owned.release();
    return st;
}

void th_fetch_config_init(th_fetch_config *cfg, size_t size) {
    init_config(cfg, size, [](th_fetch_config &c) {
        c.version = TH_LATEST;
        c.progress_interval_ms = TH_DEFAULT_PROGRESS_INTERVAL_MS;
        c.verify = TH_DEFAULT_VERIFY;
    });
}

th_status th_fetch(th_client *client, const th_fetch_config *cfg, const th_tensor *dst, size_t n,
                   uint64_t *out_version, th_replica **out_replica) {
    return th::guard([&] {
        th::check_not_forked();
        if (out_replica) *out_replica = nullptr;
        if (client == nullptr) fail(TH_ERR_INVALID_ARG, "client is NULL");
        th_fetch_config c = read_config(cfg, th_fetch_config_init, "th_fetch_config");
        th::FetchRequest req = fetch_request(c);
        if (c.tensor) req.tensor = std::string(c.tensor);
        req.offset = c.offset;
        req.length = c.length;
        th::FetchResult res = client->impl->fetch(req, buffers(dst, n), out_replica != nullptr);
        if (out_version) *out_version = res.version;
        if (out_replica) {
            auto r = std::make_unique<th_replica>();
            r->impl = std::move(res.replica);
            *out_replica = r.release();
        }
        write_stats(c.stats, res.stats);
    });
}

th_status th_fetch_ranges(th_client *client, const th_fetch_config *cfg, const th_range *ranges, size_t n,
                          uint64_t *out_version) {
    return th::guard([&] {
        th::check_not_forked();
        if (client == nullptr) fail(TH_ERR_INVALID_ARG, "client is NULL");
        th_fetch_config c = read_config(cfg, th_fetch_config_init, "th_fetch_config");
        th::FetchRequest req = fetch_request(c);
        if (c.tensor != nullptr)
            fail(TH_ERR_INVALID_ARG, "th_fetch_ranges takes the tensors from its ranges: th_fetch_config.tensor must be NULL");
        if (ranges == nullptr || n == 0) fail(TH_ERR_INVALID_ARG, "no ranges given");
        std::vector<th::Buffer> dst;
        dst.reserve(n);
        req.ranges.reserve(n);
        for (size_t i = 0; i < n; ++i) {
            const th_range &r = ranges[i];
            if (r.tensor == nullptr) fail(TH_ERR_INVALID_ARG, "range ", i, " has no tensor name");
            uint32_t kind = 0;
            std::memcpy(&kind, &r.mem_kind, sizeof kind);
            if (kind != TH_MEM_HOST && kind != TH_MEM_CUDA)
                fail(TH_ERR_INVALID_ARG, "range ", i, " of tensor '", r.tensor, "' has unknown memory kind ", kind);
            th::RangeRequest q{r.tensor, r.offset, r.row_bytes, r.rows, r.src_stride, r.dst_stride};
            th::check_range(q, r.dst_bytes, i);
            th::Buffer b;
            b.spec.name = r.tensor;
            b.spec.nbytes = th::dst_span(q);  // only what the runs cover is registered
            b.data = r.dst;
            b.kind = static_cast<th_mem_kind>(kind);
            dst.push_back(std::move(b));
            req.ranges.push_back(std::move(q));
        }
        th::FetchResult res = client->impl->fetch(req, std::move(dst), false);
        if (out_version) *out_version = res.version;
        write_stats(c.stats, res.stats);
    });
}

th_status th_replica_begin_mutation(th_replica *replica) {
    return th::guard([&] {
        th::check_not_forked();
        if (replica == nullptr) fail(TH_ERR_INVALID_ARG, "replica is NULL");
        th::Holdings *h = replica->impl->holder();
        if (h == nullptr) fail(TH_ERR_CLOSED, "the replica's client was destroyed");
        h->begin_mutation(*replica->impl);
    });
}

th_status th_pin(th_client *client, const char *model, uint64_t version) {
    return th::guard([&] {
        th::check_not_forked();
        if (client == nullptr || model == nullptr) fail(TH_ERR_INVALID_ARG, "client and model must not be NULL");
        client->impl->pin(model, version);
    });
}

th_status th_unpin(th_client *client, const char *model, uint64_t version) {
    return th::guard([&] {
        th::check_not_forked();
        if (client == nullptr || model == nullptr) fail(TH_ERR_INVALID_ARG, "client and model must not be NULL");
        client->impl->unpin(model, version);
    });
}

th_status th_wait_for_version(th_client *client, const char *model, uint64_t newer_than, uint32_t timeout_ms,
                              uint64_t *out_version) {
    return th_wait_for_version_cancelable(client, model, newer_than, timeout_ms, nullptr, out_version);
}

th_status th_wait_for_version_cancelable(th_client *client, const char *model, uint64_t newer_than,
                                         uint32_t timeout_ms, th_cancel *cancel, uint64_t *out_version) {
    return th::guard([&] {
        th::check_not_forked();
        if (client == nullptr || model == nullptr || out_version == nullptr)
            fail(TH_ERR_INVALID_ARG, "client, model and out_version must not be NULL");
        *out_version =
            client->impl->wait_for_version(model, newer_than, timeout_ms, cancel ? cancel->token.get() : nullptr);
    });
}

th_status th_describe_json(th_client *client, const char *model, uint64_t version, uint32_t shard, char **out_json) {
    return th::guard([&] {
        th::check_not_forked();
        if (client == nullptr || model == nullptr || out_json == nullptr)
            fail(TH_ERR_INVALID_ARG, "client, model and out_json must not be NULL");
        *out_json = nullptr;
        *out_json = copy_string(client->impl->describe_json(model, version, shard));
    });
}

th_status th_resolve(th_client *client, const char *model, uint64_t version, uint64_t *out_version) {
    return th::guard([&] {
        th::check_not_forked();
        if (client == nullptr || model == nullptr || out_version == nullptr)
            fail(TH_ERR_INVALID_ARG, "client, model and out_version must not be NULL");
        *out_version = client->impl->resolve(model, version);
    });
}

th_status th_status_json(th_client *client, char **out_json) {
    return th::guard([&] {
        th::check_not_forked();
        if (client == nullptr || out_json == nullptr) fail(TH_ERR_INVALID_ARG, "client and out_json must not be NULL");
        *out_json = nullptr;
        *out_json = copy_string(client->impl->status_json());
    });
}

th_status th_server_status_json(const char *server_url, uint32_t timeout_ms, char **out_json) {
    return th::guard([&] {
        th::check_not_forked();
        if (server_url == nullptr || out_json == nullptr) fail(TH_ERR_INVALID_ARG, "server_url and out_json must not be NULL");
        *out_json = nullptr;
        *out_json = copy_string(th::query_status(server_url, timeout_ms == 0 ? TH_DEFAULT_TIMEOUT_MS : timeout_ms, th::wire::cluster_token(nullptr)));
    });
}

}  // extern "C"
