#include "client/queries.hpp"

#include <algorithm>

#include "client/follow_leader.hpp"
#include "common/error.hpp"
#include "control/http_client.hpp"
#include "wire/status_json.hpp"

namespace th {

using namespace wire;

void set_pinned(ServerSession &session, const std::string &model, uint64_t version, bool pinned) {
    if (model.empty()) fail(TH_ERR_INVALID_ARG, "model name is empty");
    session.call(
        [&](Builder &b, const Header &h) { return finish(b, h, CreatePin(b, b.CreateString(model), version, pinned)); },
        Deadline(session.config().timeout_ms));
}

uint64_t wait_for_version(ServerSession &session, const std::string &model, uint64_t newer_than, uint32_t timeout_ms,
                          CancelFlag cancel) {
    if (model.empty()) fail(TH_ERR_INVALID_ARG, "model name is empty");
    Deadline deadline(timeout_ms);
    // Events say when to look; the query is the truth. A catch-up query also
    // runs after a gap in the event sequence, and at least once a second in
    // case events are lost entirely.
    constexpr uint32_t kCatchUpMs = 1000;
    // A query gets at least this long, even from a wait of no time at all
    // ("is there one now?").
    constexpr uint32_t kLeastQueryMs = 100;
    const uint32_t control_ms = session.config().timeout_ms;
    for (;;) {
        try {
            uint32_t query_ms = std::clamp<uint32_t>(static_cast<uint32_t>(std::max(deadline.remaining_ms(), 0)),
                                                     std::min(kLeastQueryMs, control_ms), control_ms);
            // A query cut short by the wait is not a server that failed.
            auto attempts = query_ms < control_ms ? ServerSession::Attempts::Whole : ServerSession::Attempts::Split;
            uint64_t v = resolve(session, model, UINT64_MAX, Deadline(query_ms), attempts);
            if (v > newer_than) return v;
        } catch (const Error &e) {
            if (e.code() != TH_ERR_NOT_FOUND) throw;
        }
        session.wait_for_commit(model, newer_than, deadline.capped(kCatchUpMs), cancel);
        if (canceled(cancel))
            fail(TH_ERR_CANCELED, "canceled while waiting for a version of model '", model, "' newer than ", newer_than);
        if (deadline.expired())
            fail(TH_ERR_TIMEOUT, "no version of model '", model, "' newer than ", newer_than, " was committed within ",
                 timeout_ms, " ms");
    }
}

std::string describe_json(ServerSession &session, const std::string &model, uint64_t version, uint32_t shard) {
    if (model.empty()) fail(TH_ERR_INVALID_ARG, "model name is empty");
    Bytes reply = session.call(
        [&](Builder &b, const Header &h) { return finish(b, h, CreateDescribe(b, b.CreateString(model), version, shard)); },
        Deadline(session.config().timeout_ms));
    const Envelope *env = GetEnvelope(reply.data());
    if (env->body_type() != Body::DescribeReply) fail(TH_ERR_PROTOCOL, "unexpected reply to Describe");
    const DescribeReply *d = env->body_as_DescribeReply();
    return describe_to_json(model, shard, *d);
}

uint64_t resolve(ServerSession &session, const std::string &model, uint64_t version) {
    return resolve(session, model, version, Deadline(session.config().timeout_ms), ServerSession::Attempts::Split);
}

uint64_t resolve(ServerSession &session, const std::string &model, uint64_t version, const Deadline &deadline,
                 ServerSession::Attempts attempts) {
    if (model.empty()) fail(TH_ERR_INVALID_ARG, "model name is empty");
    Bytes reply = session.call(
        [&](Builder &b, const Header &h) { return finish(b, h, CreateResolve(b, b.CreateString(model), version)); },
        deadline, true, attempts);
    const Envelope *env = GetEnvelope(reply.data());
    if (env->body_type() != Body::ResolveReply) fail(TH_ERR_PROTOCOL, "unexpected reply to Resolve");
    return env->body_as_ResolveReply()->version();
}

std::string status_json(ServerSession &session) {
    Bytes reply = session.call([](Builder &b, const Header &h) { return finish(b, h, CreateStatusQuery(b)); },
                               Deadline(session.config().timeout_ms));
    const Envelope *env = GetEnvelope(reply.data());
    if (env->body_type() != Body::StatusReply) fail(TH_ERR_PROTOCOL, "unexpected reply to StatusQuery");
    return status_to_json(*env->body_as_StatusReply());
}

std::string query_status(const std::string &url, uint32_t timeout_ms, const std::string &token) {
    // The server's HTTP endpoint serves the same document to its live page.
    if (url.rfind("http://", 0) == 0) {
        std::string base = url;
        while (!base.empty() && base.back() == '/') base.pop_back();
        return http_get(base + "/api/status", timeout_ms);
    }
    Deadline deadline(timeout_ms);
    // etcd mode: ask the leader etcd names.
    std::string server = FollowLeader::is_etcd_url(url)
                             ? FollowLeader(url, timeout_ms).next(LeaderRecord{}, false, deadline).url
                             : url;
    RpcClient rpc(server, token);
    Builder b(64);
    Header h;
    h.request_id = 1;
    Bytes reply = rpc.call(wire::finish(b, h, CreateStatusQuery(b)), deadline);
    const Envelope *env = verify(reply.data(), reply.size());
    if (env->body_type() == Body::ErrorReply) throw_reply_error(*env->body_as_ErrorReply(), "status query");
    if (env->body_type() != Body::StatusReply) fail(TH_ERR_PROTOCOL, "unexpected reply to StatusQuery");
    return status_to_json(*env->body_as_StatusReply());
}

}  // namespace th
