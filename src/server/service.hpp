// The metadata service: verifies and decodes each request, fences stale
// epochs, answers re-sent requests from the reply cache, and dispatches to the
// catalog (catalog.hpp) and the planner (planner.hpp), then encodes the reply.
// Transport-agnostic (the NNG server and the tests call handle() directly)
// and thread-safe (one mutex around the catalog).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "common/deadline.hpp"
#include "common/error.hpp"
#include "server/catalog.hpp"
#include "server/metrics.hpp"
#include "server/planner.hpp"
#include "server/policy.hpp"
#include "server/reachability.hpp"
#include "server/reply_cache.hpp"
#include "server/takeover_probe.hpp"
#include "tensorhub/tensorhub.h"
#include "wire/wire.hpp"

namespace th {

struct ServiceConfig {
    uint32_t lease_ms = TH_DEFAULT_LEASE_MS;
    uint32_t heartbeat_ms = TH_DEFAULT_HEARTBEAT_MS;  // told to clients
    PolicyConfig policy;
    // Started to take over from another server: until it has (and for one
    // lease after), "unknown" may only mean "not re-declared yet".
    bool standby = false;
    // etcd mode (server/leadership.hpp): serve only between lead() and
    // step_down(); every request meanwhile gets a not_leader answer.
    bool await_leadership = false;
    std::string events_url;  // told to clients in HelloReply
    // Sends one event to subscribers (must not block); may be empty.
    std::function<void(const wire::Bytes &)> publish_event;
    // List mode: the epoch the server at a URL answers a Ping with within
    // the given milliseconds; throws if it does not. Asked (on a thread of
    // its own, server/takeover_probe.hpp) before taking over from the server
    // a worker left (Hello.left_url); empty: take over without asking (the
    // simulator).
    TakeoverProbe::Ping ping_server;
    // The clock leases and takeovers are measured with, in milliseconds;
    // empty: the real one. A simulator drives the service with its own.
    std::function<uint64_t()> now_ms;
};

class Service {
  public:
    // Connect-ahead suggestions (see connect_ahead): at most this many per
    // newcomer, of which at most kPublishersAhead publishers, each offered
    // to kPublisherFanIn newcomers at most.
    static constexpr size_t kConnectAhead = 8;
    static constexpr size_t kPublishersAhead = 4;
    static constexpr uint32_t kPublisherFanIn = 32;

    explicit Service(ServiceConfig cfg);

    // Answers one request. Never throws: malformed input gets an ErrorReply
    // and leaves the state unchanged.
    wire::Bytes handle(const uint8_t *data, size_t size);

    // Drops workers whose lease ran out (and their replicas); returns how many.
    size_t expire(uint64_t now_ms);

    uint64_t epoch() const { return epoch_.load(); }

    // etcd mode: this server was elected with `epoch` (above every earlier
    // leader's and its own) and may serve until `until_ms` (now_ms()), which
    // renew() moves on. It forgets what it knew from an earlier term and,
    // after_another leader, rebuilds from workers registering again, as
    // after a takeover.
    void lead(uint64_t epoch, uint64_t until_ms, bool after_another);
    void renew(uint64_t until_ms) { lead_until_ms_ = until_ms; }
    // etcd mode: stop answering now (resigning, or the lease is lost).
    void step_down() { lead_until_ms_ = 0; }
    bool leading() const { return now_ms() < lead_until_ms_.load(); }

    // The server's metrics in the Prometheus text format.
    std::string metrics_text();

    // The status document (the same JSON as th_status_json and the CLI).
    std::string status_json();

  private:
    using Env = wire::Envelope;
    using Header = wire::Header;
    // A reply when the sender must fail over (it knows a newer epoch), else
    // nullopt; takes over when a Hello comes from a newer epoch. Sets h.epoch.
    std::optional<wire::Bytes> fence(const Env &env, Header &h);
    // List mode, before taking the lock: a refusal when a Hello that would
    // make this server take over comes from a worker whose previous server
    // still answers at the worker's epoch (the worker's calls there were
    // slow, not lost: taking over would split the workers between two
    // servers), or "ask again" while that is being found out; else nullopt.
    // Never waits.
    std::optional<wire::Bytes> keep_live_leader(const Env &env, Header h);
    // Why the sender must register (again) before this request, or nullopt.
    std::optional<std::string> unknown_sender(const Env &env, const Header &h);
    bool rebuilding() const;
    // Makes sources reported once and silent since suspect (Reachability::settle).
    void settle_reports(uint64_t now_ms);
    wire::Bytes refuse(Header h, const Error &e, wire::Body type);
    wire::Bytes dispatch(const Env &env, const Header &h);
    wire::Bytes on_hello(const Env &env, const Header &h);
    // Workers a newly registered one connects to ahead of its first fetch
    // (HelloReply.connect_ahead), kConnectAhead at most: the
    // kPublishersAhead most recent publishers (the head of every update
    // reads from one), each offered to kPublisherFanIn newcomers at most,
    // then the most recent other registrants, those on its host first.
    // None without offer: a worker registering again (a client takes them
    // at its first registration only) would use up publishers' fan-in.
    // Then remembers it as recent.
    std::vector<const WorkerInfo *> connect_ahead(const WorkerInfo &w, bool offer);
    wire::Bytes on_publish(const Env &env, const Header &h);
    wire::Bytes on_resolve(const Env &env, const Header &h);
    wire::Bytes on_plan(const Env &env, const Header &h);
    wire::Bytes on_progress(const Env &env, const Header &h);
    wire::Bytes on_fetch_done(const Env &env, const Header &h);
    wire::Bytes on_source_failed(const Env &env, const Header &h);
    wire::Bytes on_chunks_checked(const Env &env, const Header &h);
    wire::Bytes on_release(const Env &env, const Header &h);
    wire::Bytes on_heartbeat(const Header &h);
    wire::Bytes on_begin_mutation(const Env &env, const Header &h);
    wire::Bytes on_cancel_mutation(const Env &env, const Header &h);
    wire::Bytes on_pin(const Env &env, const Header &h);
    wire::Bytes on_describe(const Env &env, const Header &h);
    wire::Bytes on_goodbye(const Header &h);
    wire::Bytes on_status(const Header &h);
    wire::Bytes ack(const Header &h);
    // Sends a catalog change to subscribers as an Event, and counts it.
    void emit(wire::EventKind kind, const std::string &model, uint64_t version, uint64_t replica);
    Catalog empty_catalog();
    uint64_t clock_ms() const { return cfg_.now_ms ? cfg_.now_ms() : now_ms(); }

    ServiceConfig cfg_;
    std::atomic<uint64_t> epoch_;  // grows when this server takes over from another
    std::atomic<uint64_t> took_over_ms_{0};  // when it last did (now_ms), 0: never
    // Requests are answered until then (now_ms()): forever but in etcd mode.
    std::atomic<uint64_t> lead_until_ms_;
    uint64_t start_ms_;
    std::mutex mu_;  // guards everything below but metrics_.bad_requests
    Catalog catalog_;
    Planner planner_;
    Reachability reachability_;
    std::deque<uint64_t> recent_workers_;  // the last few registered, newest first
    // The last workers that published a version of their own, newest
    // first, and how many newcomers each was offered to.
    std::deque<std::pair<uint64_t, uint32_t>> recent_publishers_;
    // Reports of mismatched chunks (SourceFailed) that came, just after a
    // takeover, before their holder declared the replica again: readers send
    // theirs again when they move here. Applied when the replica is declared;
    // cleared at every takeover. Keyed by (worker, replica).
    std::map<std::pair<uint64_t, uint64_t>, std::vector<uint32_t>> early_reports_;
    void keep_early_report(uint64_t worker, uint64_t replica, const std::vector<uint32_t> &chunks);
    void apply_early_report(uint64_t worker, uint64_t replica);
    ReplyCache replies_;
    uint64_t event_seq_ = 0;
    ServerMetrics metrics_;
    std::unique_ptr<TakeoverProbe> probe_;  // list mode, when cfg_.ping_server is set
};

}  // namespace th
