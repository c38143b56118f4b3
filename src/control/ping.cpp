#include "control/ping.hpp"

#include "common/error.hpp"
#include "control/rpc.hpp"

namespace th {

using namespace wire;

namespace {

// Opens and closes a plain connection to url: NNG's request socket retries a
// refused dial until the request's deadline, but a killed server's port
// refuses at once, and a failover should not wait out the deadline for it.
// Transports a stream dialer does not know are left to the request.
void check_reachable(const std::string &url, const Deadline &deadline) {
    nng_stream_dialer *dialer = nullptr;
    if (nng_stream_dialer_alloc(&dialer, url.c_str()) != 0) return;
    nng_aio *aio = nullptr;
    if (nng_aio_alloc(&aio, nullptr, nullptr) != 0) {
        nng_stream_dialer_free(dialer);
        return;
    }
    nng_aio_set_timeout(aio, deadline.remaining_ms());
    nng_stream_dialer_dial(dialer, aio);
    nng_aio_wait(aio);
    int rv = nng_aio_result(aio);
    if (rv == 0) nng_stream_free(static_cast<nng_stream *>(nng_aio_get_output(aio, 0)));
    nng_aio_free(aio);
    nng_stream_dialer_free(dialer);
    if (rv == NNG_ETIMEDOUT) fail(TH_ERR_UNAVAILABLE, "cannot reach the tensorhub server at ", url, " (no connection in time)");
    if (rv != 0) fail(TH_ERR_UNAVAILABLE, "cannot reach the tensorhub server at ", url, ": ", nng_error(rv));
}

}  // namespace

uint64_t ping_server(const std::string &url, const std::string &token, const Deadline &deadline) {
    check_reachable(url, deadline);
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
