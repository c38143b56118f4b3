#include "control/ping.hpp"

#include "common/error.hpp"
#include "control/rpc.hpp"

namespace th {

using namespace wire;

uint64_t ping_server(const std::string &url, const std::string &token, const Deadline &deadline) {
    // NNG's request socket retries a refused dial until the request's
    // deadline, but a killed server's port refuses at once, and a failover
    // should not wait out the deadline for it.
    check_dial(url, static_cast<uint32_t>(deadline.remaining_ms()));
    RpcClient rpc(url, token);
    Builder b(64);
    Header h;
    h.request_id = 1;  // anonymous (worker 0): never de-duplicated
    Bytes reply = rpc.call(finish(b, h, CreatePing(b)), deadline);
    const Envelope *env = verify(reply.data(), reply.size());
    if (env->body_type() == Body::ErrorReply) throw_reply_error(*env->body_as_ErrorReply(), "Ping");
    if (env->body_type() != Body::Pong) fail(TH_ERR_PROTOCOL, "the server at ", url, " answered a Ping with no Pong");
    return env->body_as_Pong()->server_epoch();
}

}  // namespace th
