// The metadata service: decodes each request, applies it to the state and
// encodes the reply. Transport-agnostic (the NNG server and the tests call
// handle() directly) and thread-safe (one mutex around the state).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>

#include "common/deadline.hpp"
#include "server/metrics.hpp"
#include "server/policy.hpp"
#include "server/state.hpp"
#include "wire/wire.hpp"

namespace th {

struct ServiceConfig {
    uint32_t lease_ms = 10000;
    uint32_t heartbeat_ms = 1000;
    PolicyConfig policy;
    // Started to take over from another server: until it has (and for one
    // lease after), "unknown" may only mean "not re-declared yet".
    bool standby = false;
    std::string events_url;  // told to clients in HelloReply
    // Sends one event to subscribers (must not block); may be empty.
    std::function<void(const wire::Bytes &)> publish_event;
    // The clock leases and takeovers are measured with, in milliseconds;
    // empty: the real one. A simulator drives the service with its own.
    std::function<uint64_t()> now_ms;
};

class Service {
  public:
    explicit Service(ServiceConfig cfg);

    // Answers one request. Never throws: malformed input gets an ErrorReply
    // and leaves the state unchanged.
    wire::Bytes handle(const uint8_t *data, size_t size);

    // Drops workers whose lease ran out (and their replicas); returns how many.
    size_t expire(uint64_t now_ms);

    uint64_t epoch() const { return epoch_.load(); }

    // The server's metrics in the Prometheus text format.
    std::string metrics_text();

    // The status document (the same JSON as th_status_json and the CLI).
    std::string status_json();

  private:
    using Env = wire::Envelope;
    wire::Bytes dispatch(const Env &env, const wire::Header &h);
    wire::Bytes on_hello(const Env &env, const wire::Header &h);
    wire::Bytes on_publish(const Env &env, const wire::Header &h);
    wire::Bytes on_resolve(const Env &env, const wire::Header &h);
    wire::Bytes on_plan(const Env &env, const wire::Header &h);
    wire::Bytes on_progress(const Env &env, const wire::Header &h);
    wire::Bytes on_fetch_done(const Env &env, const wire::Header &h);
    wire::Bytes on_source_failed(const Env &env, const wire::Header &h);
    wire::Bytes on_release(const Env &env, const wire::Header &h);
    wire::Bytes on_status(const wire::Header &h);
    wire::Bytes on_heartbeat(const wire::Header &h);
    wire::Bytes on_begin_mutation(const Env &env, const wire::Header &h);
    wire::Bytes on_cancel_mutation(const Env &env, const wire::Header &h);
    wire::Bytes on_pin(const Env &env, const wire::Header &h);
    wire::Bytes on_describe(const Env &env, const wire::Header &h);
    wire::Bytes ack(const wire::Header &h);
    uint64_t clock_ms() const { return cfg_.now_ms ? cfg_.now_ms() : now_ms(); }

    // A version must stay readable: the newest committed, pinned, or being read.
    bool is_required(const ModelInfo &m, const VersionInfo &v) const;
    // The replica a (sender-owned) request names, or throws.
    ReplicaInfo &own_replica(uint64_t replica_id, uint64_t worker, ReplicaKey *key = nullptr);
    void emit(wire::EventKind kind, const std::string &model, uint64_t version, uint64_t replica_id = 0);

    // Why the sender must register (again) before this request, or nullopt.
    std::optional<std::string> unknown_sender(const Env &env, const wire::Header &h);
    ModelInfo &model(const std::string &name);
    // The committed version a request means (number or UINT64_MAX = latest).
    VersionInfo &committed_version(const std::string &model_name, uint64_t version);
    void remove_replica(uint64_t replica_id);
    // Keep ShardInfo::nearby and by_load and WorkerInfo::held in step with
    // the replicas; rerank() after a change to a worker's load or to whether
    // its replicas are complete.
    void index_replica(ShardInfo &s, ReplicaInfo &r);
    void unindex_replica(ReplicaInfo &r);
    void rerank(WorkerInfo &w);
    void file(ReplicaInfo &r);
    void unfile(ReplicaInfo &r);
    Candidate candidate(const ReplicaInfo &r) const;
    // A holder plans may name: its worker is live and it is not being overwritten.
    bool routable(const ReplicaInfo &r) const;
    // The policy's choice among the given groups of holders: a replica id, or
    // nullopt when none is eligible.
    std::optional<uint64_t> pick_source(const Request &req,
                                        const std::vector<const std::vector<ReplicaInfo *> *> &groups) const;
    // The policy's choice when no holder at SameRack or closer is eligible.
    std::optional<uint64_t> pick_by_load(const Request &req, const ShardInfo &s, const std::string &dc) const;
    void remove_worker(uint64_t worker_id);
    using ActiveKey = std::pair<uint64_t, std::string>;  // (reader, shard of a version)
    void end_reads(uint64_t reader, const ReplicaKey &key);
    void end_reads_of(const ActiveKey &key);
    void prune(ModelInfo &m);

    ServiceConfig cfg_;
    std::atomic<uint64_t> epoch_;  // grows when this server takes over from another
    std::atomic<uint64_t> took_over_ms_{0};  // when it last did (now_ms), 0: never
    uint64_t start_ms_;
    std::mutex mu_;
    // Hashed: every request looks its sender up. Elements stay put when it
    // grows (replicas point at their workers).
    std::unordered_map<uint64_t, WorkerInfo> workers_;
    std::map<std::string, ModelInfo> models_;
    std::unordered_map<uint64_t, ReplicaKey> replica_index_;
    // Source replicas a reader is currently planned onto, per (reader, shard of a version).
    std::map<ActiveKey, std::vector<uint64_t>> active_;
    uint64_t next_seq_ = 1;
    uint64_t event_seq_ = 0;
    // Replies to recent mutating requests, so a resent request is answered
    // again instead of applied twice.
    std::map<std::pair<uint64_t, uint64_t>, wire::Bytes> replies_;

    // Metrics (under mu_, but bad_requests_, counted before the lock).
    uint64_t committed_total_ = 0, retired_total_ = 0, source_failed_total_ = 0, lease_expired_total_ = 0;
    // Hellos: from workers we did not know, and from workers still registered
    // (whose replicas are forgotten until they declare them again).
    uint64_t registered_new_total_ = 0, registered_again_total_ = 0;
    std::atomic<uint64_t> bad_requests_total_{0};
    std::map<std::string, uint64_t> bytes_served_by_kind_;
    Histogram plan_seconds_{{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05}};
    Histogram fetch_seconds_{{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}};
    std::deque<std::pair<uint64_t, uint64_t>> reply_order_;
};

}  // namespace th
