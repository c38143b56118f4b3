// Questions a worker asks the server about models and versions, and pins:
// none of them changes what this worker holds. Each call has the client's
// control-call timeout.
#pragma once

#include <cstdint>
#include <string>

#include "client/server_session.hpp"
#include "common/deadline.hpp"

namespace th {

// The committed version `version` (a number, or UINT64_MAX for the newest) of
// model; within deadline when one is given (ServerSession::call: attempts).
uint64_t resolve(ServerSession &session, const std::string &model, uint64_t version);
uint64_t resolve(ServerSession &session, const std::string &model, uint64_t version, const Deadline &deadline,
                 ServerSession::Attempts attempts);
// Waits up to timeout_ms until model has a committed version newer than
// newer_than, and returns it. Its queries end by then too (a server that is
// gone, or a standby asking to ask again, holds the caller no longer).
// cancel (may be null): set by another thread to end the wait with TH_ERR_CANCELED.
uint64_t wait_for_version(ServerSession &session, const std::string &model, uint64_t newer_than, uint32_t timeout_ms,
                          CancelFlag cancel = nullptr);
// Keeps (model, version) required, or no longer (th_pin / th_unpin).
void set_pinned(ServerSession &session, const std::string &model, uint64_t version, bool pinned);
std::string describe_json(ServerSession &session, const std::string &model, uint64_t version, uint32_t shard);
std::string status_json(ServerSession &session);

// Asks the server at url for its status without registering a worker; an
// http:// url is the server's HTTP endpoint (GET url/api/status), an etcd://
// url names etcd, which names the leader (follow_leader.hpp).
std::string query_status(const std::string &url, uint32_t timeout_ms, const std::string &token);

}  // namespace th
